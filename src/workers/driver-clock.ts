// The time a driver runs on: it reads the clock and keeps one timer through this seam, so that a
// simulator can run the real driver on simulated time (test/sim/) while a worker runs it on the
// wall clock and Node's timers.

/** A clock and one timer. */
export interface DriverClock {
  /** Wall-clock ms. */
  nowMs(): number;
  /** Calls `fire` once `nowMs()` reaches `atMs`, in place of the timer set before (if any). */
  setTimer(atMs: number, fire: () => void): void;
  /** Cancels the timer, if one is set. */
  clearTimer(): void;
}

/** Real time: `Date.now()` and one `setTimeout`. */
export class SystemClock implements DriverClock {
  private timer: NodeJS.Timeout | undefined;

  nowMs(): number {
    return Date.now();
  }

  setTimer(atMs: number, fire: () => void): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = setTimeout(fire, Math.max(0, atMs - Date.now()));
  }

  clearTimer(): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
  }
}
