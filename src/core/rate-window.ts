// A rate over the last few samples of a growing counter, as Redis computes its `instantaneous_*`
// INFO fields: a sample every RATE_SAMPLE_INTERVAL_MS holds the counter's per-second rate since the
// one before, and the rate is the mean of the last RATE_SAMPLES samples (those not taken yet count as
// 0, as in Redis right after start). Pure: the caller passes the time and the counter.

import { assert } from './assert.js';

/** Samples averaged (Redis's STATS_METRIC_SAMPLES). */
export const RATE_SAMPLES = 16;
/** How often the owner samples (Redis's serverCron at hz 10). */
export const RATE_SAMPLE_INTERVAL_MS = 100;

export class RateWindow {
  private readonly samples = new Float64Array(RATE_SAMPLES);
  private next = 0;
  private lastMs: number;
  private lastTotal: number;

  constructor(nowMs: number, total: number) {
    this.lastMs = nowMs;
    this.lastTotal = total;
  }

  /** Records the rate since the previous sample; a clock that did not move records nothing. */
  sample(nowMs: number, total: number): void {
    assert(total >= this.lastTotal, 'a rate window counter went backwards');
    const elapsedMs = nowMs - this.lastMs;
    if (elapsedMs <= 0) return;
    this.samples[this.next] = ((total - this.lastTotal) * 1000) / elapsedMs;
    this.next = (this.next + 1) % RATE_SAMPLES;
    this.lastMs = nowMs;
    this.lastTotal = total;
  }

  /** The mean of the samples: per second. */
  perSecond(): number {
    let sum = 0;
    for (const s of this.samples) sum += s;
    return sum / RATE_SAMPLES;
  }
}
