// The wall clock as drivers read it. Pure state machines take the time in their events; the drivers
// that feed them read it here, so a test or the simulator can hand them a clock of its own.

export interface WallClock {
  /** Wall-clock milliseconds since the epoch. */
  nowMs(): number;
}

export const systemClock: WallClock = { nowMs: () => Date.now() };
