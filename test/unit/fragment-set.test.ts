// FragmentSet (src/core/fragment-set.ts): a bitmap of fragment numbers that a connection records
// its writes in for WAIT; it must agree with a Set at every step.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { FragmentSet } from '../../src/core/fragment-set.js';
import { seededFractions } from './fixtures/xorshift32.js';

test('adds, deletes, membership, size, clear and the ascending list agree with a Set, across word edges', () => {
  for (const count of [1, 31, 32, 33, 1000, 16384]) {
    const set = new FragmentSet(count);
    const model = new Set<number>();
    const random = seededFractions(count);
    assert.deepEqual(set.toArray(), []);
    for (let step = 0; step < 2000; step++) {
      if (random() < 0.01) {
        set.clear();
        model.clear();
      }
      const edge = [0, 31, 32, 63, count - 1][Math.floor(random() * 5)]!;
      const fragment = random() < 0.3 ? Math.min(edge, count - 1) : Math.floor(random() * count);
      if (random() < 0.2) {
        set.delete(fragment);
        model.delete(fragment);
      } else {
        set.add(fragment);
        model.add(fragment);
      }
      assert.equal(set.size, model.size);
      assert.equal(set.has(fragment), model.has(fragment));
    }
    assert.deepEqual(
      set.toArray(),
      [...model].sort((a, b) => a - b),
    );
    for (let f = 0; f < Math.min(count, 100); f++) assert.equal(set.has(f), model.has(f), `fragment ${f}`);
  }
});
