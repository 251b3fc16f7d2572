// Latency histograms: a thin wrapper over hdr-histogram-js (HdrHistogram's JavaScript port, pure JS
// here, no WebAssembly), recording integer microseconds with 3 significant digits (a recorded value is
// within 0.1 % of the true one) from 1 µs up, growing past an hour if it must.

import hdr from 'hdr-histogram-js';

/** The range allocated up front; larger values resize the histogram (autoResize). */
const LATENCY_US_TRACKED_MAX = 60 * 60 * 1_000_000;
const SIGNIFICANT_DIGITS = 3;

/** The percentiles every report lists. */
export const REPORT_PERCENTILES: readonly number[] = [50, 90, 99, 99.9];
/** The percentile curve (the SVG chart) runs from 0 to this, evenly on a log scale of 1/(1-p). */
export const CURVE_PERCENTILE_MAX = 99.999;

export interface LatencySummary {
  count: number;
  minUs: number;
  meanUs: number;
  p50Us: number;
  p90Us: number;
  p99Us: number;
  p999Us: number;
  maxUs: number;
}

export interface CurvePoint {
  percentile: number;
  us: number;
}

export class LatencyHistogram {
  private readonly h = hdr.build({
    bitBucketSize: 32,
    autoResize: true,
    lowestDiscernibleValue: 1,
    highestTrackableValue: LATENCY_US_TRACKED_MAX,
    numberOfSignificantValueDigits: SIGNIFICANT_DIGITS,
    useWebAssembly: false,
  });

  /** Records one latency in milliseconds (a difference of performance.now() readings). */
  recordMs(ms: number): void {
    this.h.recordValue(ms <= 0 ? 0 : Math.round(ms * 1000));
  }

  get count(): number {
    return this.h.totalCount;
  }

  /** The value at percentile `p` (0–100), in µs; 0 when empty. */
  percentileUs(p: number): number {
    return this.count === 0 ? 0 : this.h.getValueAtPercentile(p);
  }

  add(other: LatencyHistogram): void {
    this.h.add(other.h);
  }

  summary(): LatencySummary {
    const empty = this.count === 0;
    return {
      count: this.count,
      minUs: empty ? 0 : this.h.minNonZeroValue === Number.MAX_SAFE_INTEGER ? 0 : this.h.minNonZeroValue,
      meanUs: empty ? 0 : Math.round(this.h.mean * 10) / 10,
      p50Us: this.percentileUs(50),
      p90Us: this.percentileUs(90),
      p99Us: this.percentileUs(99),
      p999Us: this.percentileUs(99.9),
      // The highest equivalent value, like the percentiles (maxValue is the raw value, which can read
      // below p99.9's bucket bound).
      maxUs: this.percentileUs(100),
    };
  }

  /**
   * The latency at `steps + 1` percentiles from 0 to CURVE_PERCENTILE_MAX, evenly spaced in
   * log10(1 / (1 - p/100)) (HdrHistogram's percentile plot), then the maximum at 100.
   */
  curve(steps = 100): CurvePoint[] {
    const points: CurvePoint[] = [];
    if (this.count === 0) return points;
    const decades = Math.log10(100 / (100 - CURVE_PERCENTILE_MAX));
    for (let i = 0; i <= steps; i++) {
      const percentile = 100 * (1 - 10 ** ((-decades * i) / steps));
      points.push({ percentile, us: this.percentileUs(percentile) });
    }
    points.push({ percentile: 100, us: this.percentileUs(100) });
    return points;
  }
}
