// The time a driver runs on. Pure state machines take the time in their events; the drivers that
// feed them read the clock and keep their timer through these interfaces, so a simulator can run the
// real drivers on simulated time (test/sim/) while the node runs them on the wall clock
// (src/threads/driver-clock.ts, src/main/turn-clock.ts).

export interface WallClock {
  /** Wall-clock milliseconds since the epoch. */
  nowMs(): number;
}

/** A clock and one timer. */
export interface DriverClock extends WallClock {
  /** Calls `fire` once `nowMs()` reaches `atMs`, in place of the timer set before (if any). */
  setTimer(atMs: number, fire: () => void): void;
  /** Cancels the timer, if one is set. */
  clearTimer(): void;
}
