// The copy helpers that move values into and out of the rings: every size on either side of the
// native-copy threshold, shared and plain memory, at every alignment.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { copyBytes, copyRange, NATIVE_COPY_BYTES_MIN } from '../../src/core/bytes.js';

const CANARY = 0xee;
/** Copy sizes on both sides of the threshold, and offsets covering every alignment mod 8 twice. */
const copySize = fc.integer({ min: 0, max: 4 * NATIVE_COPY_BYTES_MIN });
const offset = fc.integer({ min: 0, max: 15 });

function target(shared: boolean, bytes: number): Buffer {
  const out = shared ? Buffer.from(new SharedArrayBuffer(bytes)) : Buffer.alloc(bytes);
  out.fill(CANARY);
  return out;
}

function pattern(bytes: number, seed: number): Buffer {
  const out = Buffer.allocUnsafe(bytes);
  for (let i = 0; i < bytes; i++) out[i] = (i * 31 + seed) & 0x7f;
  return out;
}

/** The target holds the canary everywhere but [at, at + expected.length), which holds `expected`. */
function assertCopied(out: Buffer, at: number, expected: Uint8Array): void {
  assert.deepEqual(out.subarray(at, at + expected.length), Buffer.from(expected));
  for (let i = 0; i < at; i++) assert.equal(out[i], CANARY, `byte ${i} before the copy changed`);
  for (let i = at + expected.length; i < out.length; i++)
    assert.equal(out[i], CANARY, `byte ${i} after the copy changed`);
}

test('copyBytes copies the whole source, below and above the native-copy threshold, into shared and plain memory', () => {
  fc.assert(
    fc.property(copySize, offset, offset, fc.boolean(), (bytes, sourceSkew, at, shared) => {
      // The source is a view at an arbitrary offset of a larger buffer, as a socket read's value is.
      const source = pattern(bytes + sourceSkew, bytes).subarray(sourceSkew);
      const out = target(shared, at + bytes + 16);
      assert.equal(copyBytes(out, at, source), bytes);
      assertCopied(out, at, source);
    }),
    { numRuns: 300 },
  );
});

test('copyRange copies exactly source[start, end), out of shared memory as into it', () => {
  fc.assert(
    fc.property(
      copySize,
      offset,
      offset,
      fc.boolean(),
      fc.boolean(),
      (bytes, start, at, sharedSource, sharedTarget) => {
        const plain = pattern(start + bytes + 9, start);
        const source = target(sharedSource, plain.length);
        source.set(plain);
        const out = target(sharedTarget, at + bytes + 16);
        assert.equal(copyRange(source, start, start + bytes, out, at), bytes);
        assertCopied(out, at, plain.subarray(start, start + bytes));
      },
    ),
    { numRuns: 300 },
  );
});

test('the copies take plain Uint8Arrays as well as Buffers', () => {
  const bytes = 2 * NATIVE_COPY_BYTES_MIN;
  const source = new Uint8Array(pattern(bytes, 7));
  const out = new Uint8Array(new SharedArrayBuffer(bytes + 8));
  assert.equal(copyBytes(out, 3, source), bytes);
  assert.deepEqual(Buffer.from(out.subarray(3, 3 + bytes)), Buffer.from(source));
  const back = new Uint8Array(bytes);
  assert.equal(copyRange(out, 3, 3 + bytes, back, 0), bytes);
  assert.deepEqual(back, source);
});

test('a copy past the end of its target or its source throws and writes nothing', () => {
  for (const bytes of [NATIVE_COPY_BYTES_MIN - 1, NATIVE_COPY_BYTES_MIN, 4 * NATIVE_COPY_BYTES_MIN]) {
    const out = target(true, bytes + 4);
    assert.throws(() => copyBytes(out, 5, pattern(bytes, 1)), RangeError);
    assert.throws(() => copyRange(pattern(bytes, 1), 0, bytes, out, 5), RangeError);
    assert.throws(() => copyRange(pattern(bytes, 1), 1, bytes + 1, out, 0), RangeError);
    assert.ok(
      out.every((b) => b === CANARY),
      `a refused copy of ${bytes} bytes wrote into the target`,
    );
  }
});
