// The zipfian key generator: a pure, seeded sampler of ranks 0..n-1 where rank r (the (r+1)-th most
// popular item) is drawn with probability
//
//                1 / (r+1)^θ
//   P(r)  =  ───────────────────,      ζ(n, θ) = Σ_{i=1..n} 1 / i^θ,      θ = 0.99 by default (YCSB).
//                 ζ(n, θ)
//
// Method: rejection-inversion (W. Hörmann and G. Derflinger, "Rejection-inversion to generate
// variates from monotone discrete distributions", ACM TOMACS 6(3), 1996; the form of Apache Commons
// RNG's RejectionInversionZipfSampler). With h(x) = x^-θ and its integral
//
//   H(x) = (x^(1-θ) - 1) / (1-θ)          H⁻¹(y) = (1 + y(1-θ))^(1/(1-θ))
//
// draw u uniformly in (H(1.5) - 1, H(n + 0.5)], let x = H⁻¹(u) and k = round(x) clamped to [1, n];
// accept k when k - x ≤ s (s = 2 - H⁻¹(H(2.5) - h(2)), a precomputed squeeze) or when
// u ≥ H(k + 0.5) - h(k); otherwise draw again. Accepted values follow P exactly; on average fewer
// than 1.1 draws are needed, and changing n costs one H() call, not a sum over n.
//
// Why not YCSB's own ZipfianGenerator (Gray et al., "Quickly generating billion-record synthetic
// databases", SIGMOD 1994)? It is exact only for ranks 0 and 1: its closed-form inversion over-weights
// ranks 2..10 by 19 %, 13 %, 10 %, … (θ = 0.99, n = 10^6), and it needs ζ(n, θ), an O(n) sum, whenever
// n changes. The hot set is what a zipfian run measures, so the harness uses the exact sampler.
//
// Ranks map to keys without scrambling (rank r → key r, YCSB's plain "zipfian"): both Redis and
// Tessera hash keys over slots, so consecutive hot keys do not share a server-side partition.

import { assert } from '../../src/core/assert.js';
import type { Random } from './random.js';

/** YCSB's default skew (ZipfianGenerator.ZIPFIAN_CONSTANT). */
export const ZIPFIAN_THETA_DEFAULT = 0.99;

/** ζ(n, θ) = Σ_{i=1..n} i^-θ, summed smallest term first for accuracy. O(n): for tests and reports. */
export function zeta(n: number, theta: number): number {
  let sum = 0;
  for (let i = n; i >= 1; i--) sum += 1 / i ** theta;
  return sum;
}

/** Draws zipfian ranks in [0, n); `n` may change between draws (a growing key space). */
export class ZipfianGenerator {
  readonly theta: number;
  private n = 0;
  /** H(1.5) - h(1): the lower end of u's range. */
  private readonly hIntegralX1: number;
  /** H(n + 0.5): the upper end of u's range, recomputed when n changes. */
  private hIntegralN = 0;
  /** The squeeze: k - x ≤ s accepts without evaluating H(k + 0.5). */
  private readonly s: number;

  constructor(
    private readonly random: Random,
    n: number,
    theta = ZIPFIAN_THETA_DEFAULT,
  ) {
    assert(theta > 0 && Number.isFinite(theta), 'the zipfian exponent θ must be a positive number');
    this.theta = theta;
    this.hIntegralX1 = this.hIntegral(1.5) - 1;
    this.s = 2 - this.hIntegralInverse(this.hIntegral(2.5) - this.h(2));
    this.resize(n);
  }

  /** Items in the domain: ranks are drawn from [0, n). */
  get size(): number {
    return this.n;
  }

  /** Sets the number of items (O(1)). */
  resize(n: number): void {
    assert(Number.isSafeInteger(n) && n >= 1, `a zipfian domain needs at least one item, got ${n}`);
    if (n === this.n) return;
    this.n = n;
    this.hIntegralN = this.hIntegral(n + 0.5);
  }

  /** The next rank in [0, n): rank 0 is the most popular. */
  next(): number {
    const n = this.n;
    for (;;) {
      // u uniform in (hIntegralX1, hIntegralN]: next() is in [0, 1).
      const u = this.hIntegralN + this.random.next() * (this.hIntegralX1 - this.hIntegralN);
      const x = this.hIntegralInverse(u);
      let k = Math.floor(x + 0.5);
      if (k < 1) k = 1;
      else if (k > n) k = n;
      if (k - x <= this.s || u >= this.hIntegral(k + 0.5) - this.h(k)) return k - 1;
    }
  }

  /** h(x) = x^-θ */
  private h(x: number): number {
    return Math.exp(-this.theta * Math.log(x));
  }

  /** H(x) = (x^(1-θ) - 1) / (1-θ), and log x in the limit θ → 1. */
  private hIntegral(x: number): number {
    const logX = Math.log(x);
    return expm1OverX((1 - this.theta) * logX) * logX;
  }

  /** H⁻¹(y) = (1 + y(1-θ))^(1/(1-θ)), and e^y in the limit θ → 1. */
  private hIntegralInverse(y: number): number {
    let t = y * (1 - this.theta);
    if (t < -1) t = -1; // rounding can push t just below -1, where log1p is undefined
    return Math.exp(log1pOverX(t) * y);
  }
}

/** log(1 + x) / x, continuous at 0 (Taylor series near it). */
function log1pOverX(x: number): number {
  if (Math.abs(x) > 1e-8) return Math.log1p(x) / x;
  return 1 - x * (0.5 - x * (1 / 3 - 0.25 * x));
}

/** (e^x - 1) / x, continuous at 0 (Taylor series near it). */
function expm1OverX(x: number): number {
  if (Math.abs(x) > 1e-8) return Math.expm1(x) / x;
  return 1 + x * 0.5 * (1 + (x / 3) * (1 + 0.25 * x));
}
