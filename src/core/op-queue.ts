// A bounded FIFO over a circular array: index arithmetic instead of Array.shift, and a hard
// capacity so a queue can refuse work (Backpressure) rather than grow without limit.

import { assert } from './assert.js';

export class BoundedQueue<T> {
  private readonly slots: (T | undefined)[];
  private head = 0;
  private count = 0;

  constructor(readonly capacity: number) {
    assert(Number.isInteger(capacity) && capacity >= 1, 'queue capacity must be ≥ 1');
    this.slots = new Array<T | undefined>(capacity);
  }

  get length(): number {
    return this.count;
  }

  /** Appends and returns true, or returns false when full. */
  push(item: T): boolean {
    if (this.count === this.capacity) return false;
    this.slots[(this.head + this.count) % this.capacity] = item;
    this.count++;
    return true;
  }

  shift(): T | undefined {
    if (this.count === 0) return undefined;
    const item = this.slots[this.head];
    this.slots[this.head] = undefined;
    this.head = (this.head + 1) % this.capacity;
    this.count--;
    return item;
  }

  peek(): T | undefined {
    return this.count === 0 ? undefined : this.slots[this.head];
  }
}

/**
 * Token bucket: `ratePerSec` tokens a second, at most `burst` saved up. Time arrives as `nowMs`
 * so the bucket stays pure.
 */
export class TokenBucket {
  private tokens: number;
  private lastMs: number;

  constructor(
    readonly ratePerSec: number,
    readonly burst: number,
    nowMs: number,
  ) {
    assert(ratePerSec > 0 && burst >= 1, 'token bucket needs a positive rate and a burst ≥ 1');
    this.tokens = burst;
    this.lastMs = nowMs;
  }

  private refill(nowMs: number): void {
    if (nowMs > this.lastMs) {
      this.tokens = Math.min(this.burst, this.tokens + ((nowMs - this.lastMs) * this.ratePerSec) / 1000);
      this.lastMs = nowMs;
    }
  }

  tryTake(nowMs: number): boolean {
    this.refill(nowMs);
    if (this.tokens < 1) return false;
    this.tokens -= 1;
    return true;
  }

  /**
   * Takes `n` tokens at once, going into debt when fewer are saved: for work counted after it is
   * done (a page of keys), which `waitMs` then makes the caller pay for before the next.
   */
  spend(n: number, nowMs: number): void {
    this.refill(nowMs);
    this.tokens -= n;
  }

  /** Milliseconds from `nowMs` until one token is available (0 if one is). */
  waitMs(nowMs: number): number {
    this.refill(nowMs);
    return this.tokens >= 1 ? 0 : Math.ceil(((1 - this.tokens) * 1000) / this.ratePerSec);
  }
}
