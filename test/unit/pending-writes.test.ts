// A fragment's uncommitted writes by key: found by a hash of the key bytes, exact on collisions.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { latin1 } from '../../src/core/bytes.js';
import { HASH_UNKNOWN, keyHash, PendingWrites } from '../../src/core/pending-writes.js';

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

test('until a lookup a key written apart twice is held twice, the later entry last; a lookup folds it into its first place', () => {
  const p = new PendingWrites();
  p.set(key('a'), keyHash(key('a')), rec('1'));
  p.set(key('b'), HASH_UNKNOWN, rec('2'));
  p.set(key('b'), HASH_UNKNOWN, rec('22'));
  p.set(key('a'), HASH_UNKNOWN, rec('333'));
  const show = () => p.entries().map(([k, r]) => `${k}=${r}`);
  // The second write of b came right after the first: it replaced it in place (a hot key).
  assert.deepEqual(show(), ['a=1', 'b=22', 'a=333']);
  assert.equal(p.size, 3);
  assert.equal(p.bytes, 1 + 1 + 1 + 2 + 1 + 3);
  assert.equal(p.get(key('c'), keyHash(key('c'))), undefined);
  assert.deepEqual(show(), ['a=333', 'b=22']);
  assert.equal(p.size, 2);
  assert.equal(p.bytes, 1 + 3 + 1 + 2);
  // Indexed now: a key written again replaces its entry wherever it is.
  p.set(key('a'), HASH_UNKNOWN, rec('4'));
  p.set(key('d'), HASH_UNKNOWN, rec('5'));
  assert.deepEqual(show(), ['a=4', 'b=22', 'd=5']);
  assert.equal(p.get(key('b'), HASH_UNKNOWN)?.[1].toString(), '22');
  assert.equal(p.bytes, 1 + 1 + 1 + 2 + 1 + 1);
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

test('property: applied in order its entries give what a Map by key string holds, and after a lookup each key is held once, whatever the hashes', () => {
  // Hashes are drawn from a tiny range, so most keys collide and the exact path is exercised; a
  // lookup may come at any point, after which the index is kept up to date.
  fc.assert(
    fc.property(
      fc.array(fc.tuple(fc.string({ maxLength: 3 }), fc.string({ maxLength: 4 }), fc.nat(3)), {
        maxLength: 60,
      }),
      fc.nat(60),
      (ops, lookupAt) => {
        const p = new PendingWrites();
        const model = new Map<string, string>();
        const hashOf = new Map<string, number>();
        let bytes = 0;
        const applied = () => new Map(p.entries().map(([k, r]) => [latin1(k), r.toString()]));
        for (const [i, [k, v, h]] of ops.entries()) {
          if (i === lookupAt) p.get(key('lookup'), 0);
          // A key keeps one hash, as keyHash would give it.
          const hash = hashOf.get(k) ?? h;
          hashOf.set(k, hash);
          const kb = key(k);
          const previous = model.get(k);
          if (previous !== undefined) bytes -= kb.length + Buffer.byteLength(previous);
          model.set(k, v);
          bytes += kb.length + Buffer.byteLength(v);
          p.set(kb, hash, rec(v));
          assert.deepEqual(applied(), model);
        }
        for (const [k, v] of model) assert.equal(p.get(key(k), hashOf.get(k)!)?.[1].toString(), v);
        assert.equal(p.size, model.size);
        assert.equal(p.bytes, bytes);
        assert.deepEqual(applied(), model);
      },
    ),
  );
});
