// The wall clock as the main thread's request paths read it: once per synchronous run of calls —
// the commands of one socket read, an application's burst of embedded puts — shared by their HLC
// stamps and expiry checks, as Redis caches its time per event-loop turn. A run takes microseconds
// and the HLC keeps stamps increasing, while a clock read costs ~50 ns on a VM (bench/RESULTS.md
// "Where a pipelined request's time goes").

export class TurnClock {
  /** The reading of the current run, or 0 when none is held. */
  private heldMs = 0;
  private readonly release = (): void => {
    this.heldMs = 0;
  };

  /** `read`: the wall clock in ms (tests pass their own). */
  constructor(private readonly read: () => number = Date.now) {}

  /** Wall-clock ms: read on the first call of a run, then held until the next microtask checkpoint. */
  nowMs(): number {
    if (this.heldMs === 0) {
      this.heldMs = this.read();
      queueMicrotask(this.release);
    }
    return this.heldMs;
  }
}
