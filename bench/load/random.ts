// A small seeded PRNG for the load harness: sfc32 (Chris Doty-Humphrey's Small Fast Counter, as in
// PractRand), seeded through splitmix32 so that nearby seeds give unrelated streams. Every choice a
// run makes (operation, key, scan length, value bytes) comes from one of these, so a run's request
// sequence is replayable from `--seed` (which connection sends which request still depends on timing).

/** A seeded source of uniform numbers. Pure: no clock, no global state. */
export class Random {
  private a: number;
  private b: number;
  private c: number;
  private d: number;

  constructor(seed: number) {
    let s = seed >>> 0;
    const next = (): number => {
      // splitmix32
      s = (s + 0x9e3779b9) >>> 0;
      let z = s;
      z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
      z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
      return (z ^ (z >>> 16)) >>> 0;
    };
    this.a = next();
    this.b = next();
    this.c = next();
    this.d = next() | 1;
    // Discard the first outputs, as sfc32's authors recommend, so the state is well mixed.
    for (let i = 0; i < 12; i++) this.uint32();
  }

  /** A uniform 32-bit unsigned integer. */
  uint32(): number {
    const t = (((this.a + this.b) | 0) + this.d) | 0;
    this.d = (this.d + 1) | 0;
    this.a = this.b ^ (this.b >>> 9);
    this.b = (this.c + (this.c << 3)) | 0;
    this.c = (this.c << 21) | (this.c >>> 11);
    this.c = (this.c + t) | 0;
    return t >>> 0;
  }

  /** A uniform double in [0, 1), with 32 random bits. */
  next(): number {
    return this.uint32() / 4294967296;
  }

  /** A uniform integer in [0, n), for n ≥ 1. */
  int(n: number): number {
    return Math.floor(this.next() * n);
  }
}
