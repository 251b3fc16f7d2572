// A fragment's uncommitted writes by key: found by a hash of the key bytes, exact on collisions.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { latin1 } from '../../src/core/bytes.js';
import { keyHash, PendingWrites } from '../../src/core/pending-writes.js';

const key = (s: string) => Buffer.from(s, 'latin1');
const rec = (s: string) => Buffer.from(s);

// Two keys with the same 31-bit hash, found by search; the first test checks they still collide.
const COLLIDING = ['k87022', 'k147620'] as const;

test('keyHash is a non-negative small integer and depends on every byte', () => {
  for (const k of ['', 'a', 'user:1000', 'x'.repeat(1024)]) {
    const h = keyHash(key(k));
    assert.ok(Number.isInteger(h) && h >= 0 && h < 2 ** 31, `${k}: ${h}`);
  }
  assert.notEqual(keyHash(key('user:1000')), keyHash(key('user:1001')));
  assert.equal(keyHash(key(COLLIDING[0])), keyHash(key(COLLIDING[1])));
});

test('a key set twice holds its last record once, in the place of its first arrival', () => {
  const p = new PendingWrites();
  p.set(key('a'), keyHash(key('a')), rec('1'));
  p.set(key('b'), keyHash(key('b')), rec('22'));
  p.set(key('a'), keyHash(key('a')), rec('333'));
  assert.equal(p.size, 2);
  assert.equal(p.bytes, 1 + 3 + 1 + 2);
  assert.deepEqual(
    p.entries().map(([k, r]) => `${k}=${r}`),
    ['a=333', 'b=22'],
  );
  assert.equal(p.get(key('c'), keyHash(key('c'))), undefined);
});

test('keys with the same hash are kept apart by their bytes', () => {
  const [x, y] = COLLIDING.map(key);
  const h = keyHash(x);
  const p = new PendingWrites();
  p.set(x, h, rec('x1'));
  assert.equal(p.get(y, h), undefined, 'a colliding key is not found before it is set');
  p.set(y, h, rec('y1'));
  p.set(y, h, rec('y22'));
  p.set(x, h, rec('x333'));
  assert.equal(p.size, 2);
  assert.equal(p.bytes, x.length + 4 + y.length + 3);
  assert.equal(p.get(x, h)?.[1].toString(), 'x333');
  assert.equal(p.get(y, h)?.[1].toString(), 'y22');
  // A lookup key may be a view of a larger buffer (a key inside a ring record).
  const framed = Buffer.concat([Buffer.from('..'), y, Buffer.from('..')]);
  assert.equal(p.get(framed.subarray(2, 2 + y.length), h)?.[1].toString(), 'y22');
  assert.deepEqual(
    p
      .entries()
      .map(([k]) => latin1(k))
      .sort(),
    [...COLLIDING].sort(),
  );
});

test('property: holds exactly what a Map by key string holds, whatever the hashes', () => {
  // Hashes are drawn from a tiny range, so most keys collide and the exact path is exercised.
  fc.assert(
    fc.property(
      fc.array(fc.tuple(fc.string({ maxLength: 3 }), fc.string({ maxLength: 4 }), fc.nat(3)), {
        maxLength: 60,
      }),
      (ops) => {
        const p = new PendingWrites();
        const model = new Map<string, string>();
        const hashOf = new Map<string, number>();
        let bytes = 0;
        for (const [k, v, h] of ops) {
          // A key keeps one hash, as keyHash would give it.
          const hash = hashOf.get(k) ?? h;
          hashOf.set(k, hash);
          const kb = key(k);
          const previous = model.get(k);
          if (previous !== undefined) bytes -= kb.length + Buffer.byteLength(previous);
          model.set(k, v);
          bytes += kb.length + Buffer.byteLength(v);
          p.set(kb, hash, rec(v));
        }
        assert.equal(p.size, model.size);
        assert.equal(p.bytes, bytes);
        for (const [k, v] of model) assert.equal(p.get(key(k), hashOf.get(k)!)?.[1].toString(), v);
        const held = new Map(p.entries().map(([k, r]) => [latin1(k), r.toString()]));
        assert.deepEqual(held, model);
      },
    ),
  );
});
