// HyperLogLog in Redis 7.0's own format, so a key written here reads the same in Redis and back:
// a 16-byte header ("HYLL", the encoding, a cached cardinality whose top bit marks it stale), then
// 16 384 six-bit registers, either dense (12 288 bytes) or sparse (run-length opcodes ZERO, XZERO
// and VAL, promoted to dense past 3 000 bytes or past a register value of 32). Registers are updated
// the way Redis updates them, opcode splits and merges included, so the bytes match, and the
// cardinality is Ertl's estimator in the same double arithmetic.

/** Register index bits and registers. */
const HLL_P = 14;
const HLL_Q = 64 - HLL_P;
const HLL_REGISTERS = 1 << HLL_P;
const HLL_BITS = 6;
const HLL_REGISTER_MAX = (1 << HLL_BITS) - 1;
const HLL_HDR_SIZE = 16;
/** Bytes of a dense HyperLogLog. */
export const HLL_DENSE_SIZE = HLL_HDR_SIZE + Math.ceil((HLL_REGISTERS * HLL_BITS) / 8);
const HLL_DENSE = 0;
const HLL_SPARSE = 1;
/** Redis's hll-sparse-max-bytes default: a longer sparse form is promoted to dense. */
export const HLL_SPARSE_MAX_BYTES = 3000;
const SPARSE_VAL_MAX_VALUE = 32;
const SPARSE_VAL_MAX_LEN = 4;
const SPARSE_ZERO_MAX_LEN = 64;
const SPARSE_XZERO_MAX_LEN = 16384;
/** 0.5 / ln 2, Redis's HLL_ALPHA_INF (the double nearest 0.721347520444481703680). */
const ALPHA_INF = 0.7213475204444817;
const HASH_SEED = 0xadc83b19;

export const ERR_NOT_HLL = 'WRONGTYPE Key is not a valid HyperLogLog string value.';
export const ERR_CORRUPT_HLL = 'INVALIDOBJ Corrupted HLL object detected';

/** A HyperLogLog being worked on: its header, and either its sparse opcodes or dense registers. */
export interface Hll {
  header: Buffer;
  sparse: number[] | undefined;
  /** Dense registers, with one spare byte so the last register's two-byte access stays inside. */
  dense: Uint8Array | undefined;
}

// ── Hashing (MurmurHash64A, as Redis runs it), in 32-bit halves ────────────────────────────────────

/** (aHi:aLo) × (bHi:bLo) mod 2^64, as [hi, lo] unsigned 32-bit halves. */
function mul64(aHi: number, aLo: number, bHi: number, bLo: number): [number, number] {
  const a0 = aLo & 0xffff;
  const a1 = aLo >>> 16;
  const b0 = bLo & 0xffff;
  const b1 = bLo >>> 16;
  const p00 = a0 * b0;
  const p01 = a0 * b1;
  const p10 = a1 * b0;
  const mid = (p00 >>> 16) + (p01 & 0xffff) + (p10 & 0xffff);
  const lo = ((mid & 0xffff) << 16) | (p00 & 0xffff);
  const carry = Math.floor(mid / 0x10000) + Math.floor(p01 / 0x10000) + Math.floor(p10 / 0x10000) + a1 * b1;
  const hi = (carry + Math.imul(aHi, bLo) + Math.imul(aLo, bHi)) >>> 0;
  return [hi >>> 0, lo >>> 0];
}

const M_HI = 0xc6a4a793;
const M_LO = 0x5bd1e995;

/** h ^= h >> 47 on [hi, lo]. */
function xorShift47(hi: number, lo: number): [number, number] {
  return [hi, (lo ^ (hi >>> 15)) >>> 0];
}

/** MurmurHash64A of `data` with Redis's seed, as [hi, lo]. */
export function murmurHash64A(data: Uint8Array): [number, number] {
  const len = data.length;
  // h = seed ^ (len * m)
  let [hHi, hLo] = mul64(0, len >>> 0, M_HI, M_LO);
  hLo = (hLo ^ HASH_SEED) >>> 0;
  const blocks = len - (len & 7);
  for (let i = 0; i < blocks; i += 8) {
    const kLo = (data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)) >>> 0;
    const kHi = (data[i + 4] | (data[i + 5] << 8) | (data[i + 6] << 16) | (data[i + 7] << 24)) >>> 0;
    let [k1, k0] = mul64(kHi, kLo, M_HI, M_LO);
    [k1, k0] = xorShift47(k1, k0);
    [k1, k0] = mul64(k1, k0, M_HI, M_LO);
    hHi = (hHi ^ k1) >>> 0;
    hLo = (hLo ^ k0) >>> 0;
    [hHi, hLo] = mul64(hHi, hLo, M_HI, M_LO);
  }
  const rest = len & 7;
  if (rest > 0) {
    for (let j = rest - 1; j >= 0; j--) {
      const byte = data[blocks + j];
      if (j >= 4) hHi = (hHi ^ (byte << (8 * (j - 4)))) >>> 0;
      else hLo = (hLo ^ (byte << (8 * j))) >>> 0;
    }
    [hHi, hLo] = mul64(hHi, hLo, M_HI, M_LO);
  }
  [hHi, hLo] = xorShift47(hHi, hLo);
  [hHi, hLo] = mul64(hHi, hLo, M_HI, M_LO);
  [hHi, hLo] = xorShift47(hHi, hLo);
  return [hHi, hLo];
}

/** An element's register and its run of zeros plus one (1..Q+1): Redis's hllPatLen. */
export function hllPattern(element: Uint8Array): { index: number; count: number } {
  const [hi, lo] = murmurHash64A(element);
  const index = lo & (HLL_REGISTERS - 1);
  // The bits above the index, with a 1 at bit Q so the run ends there at the latest.
  const low = lo >>> HLL_P;
  let count: number;
  if (low !== 0) count = ctz32(low) + 1;
  else if (hi !== 0) count = 32 - HLL_P + ctz32(hi) + 1;
  else count = HLL_Q + 1;
  return { index, count: Math.min(count, HLL_Q + 1) };
}

function ctz32(n: number): number {
  return 31 - Math.clz32(n & -n);
}

/** PFADD's elements as (u16 LE register, u8 count) triples, hashed where the command enters. */
export function encodeHllPatterns(elements: readonly Uint8Array[]): Buffer {
  const out = Buffer.allocUnsafe(elements.length * 3);
  elements.forEach((element, i) => {
    const { index, count } = hllPattern(element);
    out.writeUInt16LE(index, i * 3);
    out[i * 3 + 2] = count;
  });
  return out;
}

// ── The representation ────────────────────────────────────────────────────────────────────────

/** A new, empty HyperLogLog: sparse, one XZERO opcode covering every register, cache valid at 0. */
export function createHll(): Hll {
  const header = Buffer.alloc(HLL_HDR_SIZE);
  header.write('HYLL', 0, 'latin1');
  header[4] = HLL_SPARSE;
  const sparse: number[] = [];
  for (let left = HLL_REGISTERS; left > 0; left -= Math.min(left, SPARSE_XZERO_MAX_LEN)) {
    const n = Math.min(left, SPARSE_XZERO_MAX_LEN) - 1;
    sparse.push((n >> 8) | 0x40, n & 0xff);
  }
  return { header, sparse, dense: undefined };
}

/** Whether `value` passes Redis's check (magic, encoding, dense length); the sparse body is checked later. */
export function isHll(value: Uint8Array): boolean {
  if (value.length < HLL_HDR_SIZE) return false;
  if (value[0] !== 0x48 || value[1] !== 0x59 || value[2] !== 0x4c || value[3] !== 0x4c) return false;
  if (value[4] > HLL_SPARSE) return false;
  return value[4] !== HLL_DENSE || value.length === HLL_DENSE_SIZE;
}

/** Opens a value that `isHll` accepted. */
export function openHll(value: Uint8Array): Hll {
  const header = Buffer.from(value.subarray(0, HLL_HDR_SIZE));
  if (value[4] === HLL_DENSE) {
    const dense = new Uint8Array(HLL_DENSE_SIZE - HLL_HDR_SIZE + 1);
    dense.set(value.subarray(HLL_HDR_SIZE), 0);
    return { header, sparse: undefined, dense };
  }
  return { header, sparse: Array.from(value.subarray(HLL_HDR_SIZE)), dense: undefined };
}

export function hllBytes(hll: Hll): Buffer {
  const body =
    hll.dense !== undefined
      ? hll.dense.subarray(0, HLL_DENSE_SIZE - HLL_HDR_SIZE)
      : Uint8Array.from(hll.sparse!);
  return Buffer.concat([hll.header, body]);
}

export function invalidateCache(hll: Hll): void {
  hll.header[15] |= 0x80;
}

/** The cached cardinality, or undefined when stale. */
export function cachedCardinality(hll: Hll): number | undefined {
  if (hll.header[15] & 0x80) return undefined;
  return Number(hll.header.readBigUInt64LE(8));
}

export function cacheCardinality(hll: Hll, cardinality: number): void {
  hll.header.writeBigUInt64LE(BigInt(cardinality), 8);
}

// ── Registers ─────────────────────────────────────────────────────────────────────────────────

function denseGet(registers: Uint8Array, index: number): number {
  const byte = (index * HLL_BITS) >> 3;
  const fb = (index * HLL_BITS) & 7;
  return ((registers[byte] >> fb) | (registers[byte + 1] << (8 - fb))) & HLL_REGISTER_MAX;
}

function denseSetRegister(registers: Uint8Array, index: number, value: number): void {
  const byte = (index * HLL_BITS) >> 3;
  const fb = (index * HLL_BITS) & 7;
  registers[byte] = (registers[byte] & ~(HLL_REGISTER_MAX << fb)) | (value << fb);
  registers[byte + 1] = (registers[byte + 1] & ~(HLL_REGISTER_MAX >> (8 - fb))) | (value >> (8 - fb));
}

/** Raises register `index` to `count`: 1 if it changed, 0 if not. */
function denseSet(registers: Uint8Array, index: number, count: number): 0 | 1 {
  if (count <= denseGet(registers, index)) return 0;
  denseSetRegister(registers, index, count);
  return 1;
}

const isZero = (op: number) => (op & 0xc0) === 0;
const isXzero = (op: number) => (op & 0xc0) === 0x40;
const isVal = (op: number) => (op & 0x80) !== 0;
const zeroLen = (op: number) => (op & 0x3f) + 1;
const xzeroLen = (op: number, next: number | undefined) => (((op & 0x3f) << 8) | (next ?? 0)) + 1;
const valValue = (op: number) => ((op >> 2) & 0x1f) + 1;
const valLen = (op: number) => (op & 0x3) + 1;
const valOp = (value: number, len: number) => (((value - 1) << 2) | (len - 1) | 0x80) & 0xff;
const zeroOps = (len: number): number[] =>
  len > SPARSE_ZERO_MAX_LEN ? [((len - 1) >> 8) | 0x40, (len - 1) & 0xff] : [len - 1];

/**
 * Walks sparse opcodes run by run, calling `visit` with each run's value (0 for ZERO and XZERO), its
 * first register and its length. It stops before a run that would pass the last register (Redis's
 * checks since its CVE-2025-32023 fix): `covered` counts the registers walked, `overflowed` says
 * whether it stopped there.
 */
function walkSparse(
  s: readonly number[],
  visit: (value: number, first: number, length: number) => void,
): { covered: number; overflowed: boolean } {
  let covered = 0;
  for (let p = 0; p < s.length; ) {
    const op = s[p];
    const length = isZero(op) ? zeroLen(op) : isXzero(op) ? xzeroLen(op, s[p + 1]) : valLen(op);
    if (covered + length > HLL_REGISTERS) return { covered, overflowed: true };
    visit(isVal(op) ? valValue(op) : 0, covered, length);
    covered += length;
    p += isXzero(op) ? 2 : 1;
  }
  return { covered, overflowed: false };
}

/** Converts a sparse HyperLogLog to dense; false if its opcodes do not cover exactly every register. */
function toDense(hll: Hll): boolean {
  if (hll.dense !== undefined) return true;
  const dense = new Uint8Array(HLL_DENSE_SIZE - HLL_HDR_SIZE + 1);
  const { covered } = walkSparse(hll.sparse!, (value, first, length) => {
    if (value !== 0) for (let k = 0; k < length; k++) denseSetRegister(dense, first + k, value);
  });
  // As Redis's conversion does, a walk cut short exactly at the last register still counts.
  if (covered !== HLL_REGISTERS) return false;
  hll.header[4] = HLL_DENSE;
  hll.dense = dense;
  hll.sparse = undefined;
  return true;
}

/** Raises register `index` to `count`: 1 if it changed, 0 if not, -1 if the HyperLogLog is corrupt. */
export function hllSet(hll: Hll, index: number, count: number): -1 | 0 | 1 {
  if (hll.dense !== undefined) return denseSet(hll.dense, index, count);
  if (count > SPARSE_VAL_MAX_VALUE) return promote(hll, index, count);
  const s = hll.sparse!;
  // Step 1: find the opcode covering the register.
  let p = 0;
  let first = 0;
  let span = 0;
  let prev = -1;
  while (p < s.length) {
    let length = 1;
    const op = s[p];
    if (isZero(op)) span = zeroLen(op);
    else if (isVal(op)) span = valLen(op);
    else {
      span = xzeroLen(op, s[p + 1]);
      length = 2;
    }
    if (index <= first + span - 1) break;
    prev = p;
    p += length;
    first += span;
  }
  if (span === 0 || p >= s.length) return -1;
  const op = s[p];
  const runlen = isZero(op) ? zeroLen(op) : isXzero(op) ? xzeroLen(op, s[p + 1]) : valLen(op);
  // Step 2: the cases Redis handles in place.
  let updated = false;
  if (isVal(op)) {
    if (valValue(op) >= count) return 0;
    if (runlen === 1) {
      s[p] = valOp(count, 1);
      updated = true;
    }
  }
  if (!updated && isZero(op) && runlen === 1) {
    s[p] = valOp(count, 1);
    updated = true;
  }
  if (!updated) {
    // The general case: split the opcode around the register.
    const last = first + span - 1;
    const sequence: number[] = [];
    if (isVal(op)) {
      const value = valValue(op);
      if (index !== first) sequence.push(valOp(value, index - first));
      sequence.push(valOp(count, 1));
      if (index !== last) sequence.push(valOp(value, last - index));
    } else {
      if (index !== first) sequence.push(...zeroOps(index - first));
      sequence.push(valOp(count, 1));
      if (index !== last) sequence.push(...zeroOps(last - index));
    }
    // Step 3: put the sequence in place, unless the result would be too long for sparse.
    const oldLength = isXzero(op) ? 2 : 1;
    const delta = sequence.length - oldLength;
    if (delta > 0 && HLL_HDR_SIZE + s.length + delta > HLL_SPARSE_MAX_BYTES)
      return promote(hll, index, count);
    s.splice(p, oldLength, ...sequence);
  }
  // Step 4: merge adjacent VAL opcodes of equal value, scanning up to five opcodes from `prev`.
  let q = Math.max(prev, 0);
  for (let scan = 5; q < s.length && scan > 0; scan--) {
    if (isXzero(s[q])) {
      q += 2;
      continue;
    }
    if (isZero(s[q])) {
      q++;
      continue;
    }
    if (q + 1 < s.length && isVal(s[q + 1]) && valValue(s[q]) === valValue(s[q + 1])) {
      const length = valLen(s[q]) + valLen(s[q + 1]);
      if (length <= SPARSE_VAL_MAX_LEN) {
        s[q + 1] = valOp(valValue(s[q]), length);
        s.splice(q, 1);
        continue;
      }
    }
    q++;
  }
  invalidateCache(hll);
  return 1;
}

function promote(hll: Hll, index: number, count: number): -1 | 0 | 1 {
  if (!toDense(hll)) return -1;
  return denseSet(hll.dense!, index, count);
}

/** Adds `patterns` (`encodeHllPatterns`) in order: how many changed a register, or -1 if corrupt. */
export function hllAdd(hll: Hll, patterns: Uint8Array): number {
  let changed = 0;
  for (let at = 0; at + 3 <= patterns.length; at += 3) {
    const result = hllSet(hll, patterns[at] | (patterns[at + 1] << 8), patterns[at + 2]);
    if (result === -1) return -1;
    changed += result;
  }
  return changed;
}

/** Raises `max[i]` to each register of `hll`; false if its sparse opcodes are corrupt. */
export function hllMergeInto(max: Uint8Array, hll: Hll): boolean {
  if (hll.dense !== undefined) {
    for (let i = 0; i < HLL_REGISTERS; i++) max[i] = Math.max(max[i], denseGet(hll.dense, i));
    return true;
  }
  const walk = walkSparse(hll.sparse!, (value, first, length) => {
    for (let i = first; i < first + length; i++) max[i] = Math.max(max[i], value);
  });
  return !walk.overflowed && walk.covered === HLL_REGISTERS;
}

/** A register array for `hllMergeInto`. */
export const newRegisterMax = () => new Uint8Array(HLL_REGISTERS);

/** PFMERGE's write: every nonzero register of `max` raised in `hll`, in register order. */
export function hllRaiseAll(hll: Hll, max: Uint8Array, dense: boolean): boolean {
  if (dense && !toDense(hll)) return false;
  for (let i = 0; i < HLL_REGISTERS; i++) if (max[i] !== 0) hllSet(hll, i, max[i]);
  invalidateCache(hll);
  return true;
}

export const isDense = (hll: Hll) => hll.dense !== undefined;

// ── Cardinality ───────────────────────────────────────────────────────────────────────────────

/** The estimate for `hll`, or undefined if its sparse opcodes do not cover every register. */
export function hllCount(hll: Hll): number | undefined {
  const histogram = new Array<number>(64).fill(0);
  if (hll.dense !== undefined) {
    for (let i = 0; i < HLL_REGISTERS; i++) histogram[denseGet(hll.dense, i)]++;
  } else {
    const walk = walkSparse(hll.sparse!, (value, _first, length) => {
      histogram[value] += length;
    });
    if (walk.overflowed || walk.covered !== HLL_REGISTERS) return undefined;
  }
  return estimate(histogram);
}

/** The estimate over raw registers (PFCOUNT of several keys). */
export function registersCount(max: Uint8Array): number {
  const histogram = new Array<number>(64).fill(0);
  for (const r of max) histogram[r]++;
  return estimate(histogram);
}

/** Ertl's estimator ("New cardinality estimation algorithms for HyperLogLog sketches"), as Redis computes it. */
function estimate(histogram: number[]): number {
  const m = HLL_REGISTERS;
  let z = m * tau((m - histogram[HLL_Q + 1]) / m);
  for (let j = HLL_Q; j >= 1; --j) {
    z += histogram[j];
    z *= 0.5;
  }
  z += m * sigma(histogram[0] / m);
  return Math.round((ALPHA_INF * m * m) / z);
}

function sigma(x: number): number {
  if (x === 1) return Number.POSITIVE_INFINITY;
  let y = 1;
  let z = x;
  let previous: number;
  do {
    x *= x;
    previous = z;
    z += x * y;
    y += y;
  } while (previous !== z);
  return z;
}

function tau(x: number): number {
  if (x === 0 || x === 1) return 0;
  let y = 1;
  let z = 1 - x;
  let previous: number;
  do {
    x = Math.sqrt(x);
    previous = z;
    y *= 0.5;
    z -= (1 - x) * (1 - x) * y;
  } while (previous !== z);
  return z / 3;
}
