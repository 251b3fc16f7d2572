// The first 8 bytes of SHA-256 (FIPS 180-4) of a short message, for rendezvous weights. A plan
// over many members hashes every (member, fragment) pair once: node:crypto's per-call cost
// (~2.7 µs for a 16-byte message) is six times this one-block compression, and a cold plan over
// 100 members and 16 384 fragments makes 1.6 million of them. Longer messages go to node:crypto.

import { createHash } from 'node:crypto';

/** Messages up to this length fit one 64-byte block with the padding's 0x80 and 64-bit length. */
export const SHA256_ONE_BLOCK_BYTES_MAX = 55;

const ROUND_CONSTANTS = new Int32Array([
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98,
  0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
  0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8,
  0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
  0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819,
  0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
  0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
  0xc67178f2,
]);
const INITIAL_A = 0x6a09e667 | 0;
const INITIAL_B = 0xbb67ae85 | 0;

const block = new Uint8Array(64);
const schedule = new Int32Array(64);

/**
 * SHA-256 of `message[0, length)`, its first 8 bytes as big-endian halves: `out[0]` the first four
 * bytes, `out[1]` the next four. Allocation-free up to SHA256_ONE_BLOCK_BYTES_MAX bytes.
 */
export function sha256Head(message: Uint8Array, length: number, out: Uint32Array): void {
  if (length > SHA256_ONE_BLOCK_BYTES_MAX) {
    const digest = createHash('sha256').update(message.subarray(0, length)).digest();
    out[0] = digest.readUInt32BE(0);
    out[1] = digest.readUInt32BE(4);
    return;
  }
  block.set(message.subarray(0, length), 0);
  block[length] = 0x80;
  block.fill(0, length + 1, 60);
  const bits = length * 8;
  block[60] = bits >>> 24;
  block[61] = (bits >>> 16) & 0xff;
  block[62] = (bits >>> 8) & 0xff;
  block[63] = bits & 0xff;
  const w = schedule;
  for (let i = 0; i < 16; i++)
    w[i] = (block[4 * i] << 24) | (block[4 * i + 1] << 16) | (block[4 * i + 2] << 8) | block[4 * i + 3];
  for (let i = 16; i < 64; i++) {
    const w15 = w[i - 15];
    const w2 = w[i - 2];
    const s0 = ((w15 >>> 7) | (w15 << 25)) ^ ((w15 >>> 18) | (w15 << 14)) ^ (w15 >>> 3);
    const s1 = ((w2 >>> 17) | (w2 << 15)) ^ ((w2 >>> 19) | (w2 << 13)) ^ (w2 >>> 10);
    w[i] = (w[i - 16] + s0 + w[i - 7] + s1) | 0;
  }
  let a = INITIAL_A;
  let b = INITIAL_B;
  let c = 0x3c6ef372 | 0;
  let d = 0xa54ff53a | 0;
  let e = 0x510e527f | 0;
  let f = 0x9b05688c | 0;
  let g = 0x1f83d9ab | 0;
  let h = 0x5be0cd19 | 0;
  for (let i = 0; i < 64; i++) {
    const s1 = ((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7));
    const choice = (e & f) ^ (~e & g);
    const t1 = (h + s1 + choice + ROUND_CONSTANTS[i] + w[i]) | 0;
    const s0 = ((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10));
    const majority = (a & b) ^ (a & c) ^ (b & c);
    h = g;
    g = f;
    f = e;
    e = (d + t1) | 0;
    d = c;
    c = b;
    b = a;
    a = (t1 + s0 + majority) | 0;
  }
  out[0] = (a + INITIAL_A) >>> 0;
  out[1] = (b + INITIAL_B) >>> 0;
}
