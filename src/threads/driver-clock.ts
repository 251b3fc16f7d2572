// Real time for the drivers of a worker and of the main thread: `Date.now()` and one `setTimeout` (the simulator's clock is in
// test/sim/sim-world.ts).

import type { DriverClock } from '../core/clock.js';

export class SystemClock implements DriverClock {
  private timer: NodeJS.Timeout | undefined;

  nowMs(): number {
    return Date.now();
  }

  setTimer(atMs: number, fire: () => void): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = setTimeout(fire, Math.max(0, atMs - Date.now()));
    // A driver's next step never keeps a process alive by itself: the node's sockets and worker
    // threads do while it runs, and once it closed nothing may hold its exit.
    this.timer.unref();
  }

  clearTimer(): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
  }
}
