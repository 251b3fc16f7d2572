// Rendezvous weights and the kept ranking the planner reads: the weight is SHA-256 as node:crypto
// computes it (a change would move replicas in every running cluster), and the ranking kept across
// member changes is, at every rank asked, the full ranking computed afresh (by fast-check).

import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import { compareIds } from '../../src/core/assignment-table.js';
import { RendezvousRanking, rendezvousWeight } from '../../src/core/placement.js';
import { SHA256_ONE_BLOCK_BYTES_MAX, sha256Head } from '../../src/core/sha256-head.js';

function cryptoHead(bytes: Uint8Array): [number, number] {
  const digest = createHash('sha256').update(bytes).digest();
  return [digest.readUInt32BE(0), digest.readUInt32BE(4)];
}

/** Every member ranked afresh: weight descending, ties by byte order. */
function fullRanking(members: readonly string[], fragment: number): string[] {
  return members
    .map((id) => ({ id, w: rendezvousWeight(id, fragment) }))
    .sort((a, b) => (a.w === b.w ? compareIds(a.id, b.id) : a.w > b.w ? -1 : 1))
    .map((r) => r.id);
}

describe('sha256Head', () => {
  test('fast-check: the first 8 bytes of SHA-256 as node:crypto computes them, one block or more', () => {
    const out = new Uint32Array(2);
    fc.assert(
      fc.property(fc.uint8Array({ minLength: 0, maxLength: 3 * 64 }), fc.nat(8), (bytes, spare) => {
        // A message shorter than its buffer: only the first `length` bytes count.
        const buffer = new Uint8Array(bytes.length + spare).fill(0xa5);
        buffer.set(bytes, 0);
        sha256Head(buffer, bytes.length, out);
        assert.deepEqual([out[0], out[1]], cryptoHead(bytes));
      }),
      { numRuns: 2_000 },
    );
  });

  test('every length around the one-block limit', () => {
    const out = new Uint32Array(2);
    for (let length = 0; length <= SHA256_ONE_BLOCK_BYTES_MAX + 10; length++) {
      const bytes = Uint8Array.from({ length }, (_, i) => (i * 37 + length) & 0xff);
      sha256Head(bytes, length, out);
      assert.deepEqual([out[0], out[1]], cryptoHead(bytes), `length ${length}`);
    }
  });
});

describe('rendezvous weights', () => {
  test('the weight of (member, fragment) is the first 8 bytes of SHA-256 over "member \\0 fragment"', () => {
    for (const [member, fragment] of [
      ['a', 0],
      ['node-7', 16_383],
      ['nødé-ü', 42],
      ['x'.repeat(255), 9_999],
    ] as const) {
      const digest = createHash('sha256').update(`${member}\0${fragment}`).digest();
      assert.equal(
        rendezvousWeight(member, fragment),
        digest.readBigUInt64BE(0),
        `${member.slice(0, 8)} ${fragment}`,
      );
    }
    // Pinned: every running cluster's placement follows from these values.
    assert.equal(rendezvousWeight('a', 0), 0xb0e8de8d4e6b1207n);
  });
});

describe('RendezvousRanking', () => {
  const idArb = fc.oneof(
    fc.string({ minLength: 1, maxLength: 6 }),
    fc.string({ unit: 'grapheme', minLength: 1, maxLength: 4 }),
    fc.string({ minLength: 50, maxLength: 70 }),
  );
  const stepArb = fc.record({
    joins: fc.uniqueArray(idArb, { maxLength: 4 }),
    leaves: fc.array(fc.nat(), { maxLength: 3 }),
    asks: fc.array(fc.record({ fragment: fc.nat(), rank: fc.nat() }), { minLength: 1, maxLength: 12 }),
  });

  test('fast-check: after any run of joins and leaves, every rank asked is the full ranking’s', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 48 }),
        fc.uniqueArray(idArb, { minLength: 1, maxLength: 12 }),
        fc.array(stepArb, { minLength: 1, maxLength: 10 }),
        (fragmentCount, first, steps) => {
          const ranking = new RendezvousRanking(fragmentCount);
          let members = [...first];
          ranking.setMembers(members);
          for (const step of steps) {
            const gone = new Set(step.leaves.map((i) => members[i % members.length]));
            members = members.filter((id) => !gone.has(id));
            for (const id of step.joins) if (!members.includes(id)) members.push(id);
            ranking.setMembers(members);
            const full = new Map<number, string[]>();
            for (const { fragment, rank } of step.asks) {
              const f = fragment % fragmentCount;
              if (!full.has(f)) full.set(f, fullRanking(members, f));
              const expected = full.get(f) as string[];
              const r = rank % (members.length + 2);
              assert.equal(ranking.at(f, r), expected[r], `fragment ${f} rank ${r} of ${members.length}`);
            }
          }
        },
      ),
      { numRuns: 300 },
    );
  });

  test('a ranking asked in full stays full through joins and leaves', () => {
    const fragments = 200;
    let members = Array.from({ length: 40 }, (_, i) => `m${i}`);
    const ranking = new RendezvousRanking(fragments);
    const check = (): void => {
      for (let f = 0; f < fragments; f++) {
        assert.deepEqual(
          members.map((_, rank) => ranking.at(f, rank)),
          fullRanking(members, f),
        );
        assert.equal(ranking.at(f, members.length), undefined, 'past the members');
      }
    };
    ranking.setMembers(members);
    check();
    // Joins land anywhere in the kept full lists, last included; a leave strikes its place.
    members = [...members, 'm40'];
    ranking.setMembers(members);
    check();
    members = members.filter((id) => id !== 'm7');
    ranking.setMembers(members);
    check();
  });

  test('warm ranks in slices of its budget; once warm, the ranks it was asked for weigh nothing', () => {
    const members = Array.from({ length: 50 }, (_, i) => `w${i}`);
    const ranking = new RendezvousRanking(64);
    ranking.setMembers(members);
    const fragments = Array.from({ length: 64 }, (_, i) => i);
    let slices = 0;
    for (;;) {
      const before = ranking.weighed;
      const done = ranking.warm(fragments, 3, 500);
      slices++;
      // Whole fragments, at most the budget (each fragment weighs every member once).
      assert.ok(ranking.weighed - before <= 500, `slice ${slices}: ${ranking.weighed - before} weighs`);
      if (done) break;
      assert.ok(ranking.weighed - before >= 50, 'a slice ranks at least one fragment');
    }
    assert.equal(slices, Math.ceil(64 / 10));
    const warm = ranking.weighed;
    for (const f of fragments)
      assert.deepEqual(
        [0, 1, 2].map((r) => ranking.at(f, r)),
        fullRanking(members, f).slice(0, 3),
      );
    assert.equal(ranking.weighed, warm, 'no weigh after warming');
    assert.equal(ranking.warm(fragments, 3, 500), true);
    assert.equal(ranking.weighed, warm);
  });

  test('an empty member set ranks nobody', () => {
    const ranking = new RendezvousRanking(4);
    ranking.setMembers([]);
    assert.equal(ranking.at(0, 0), undefined);
    assert.throws(() => ranking.at(4, 0), /fragment 4 outside 0\.\.3/);
  });
});

describe('compareIds', () => {
  test('fast-check: orders ids as their UTF-8 bytes compare, surrogates and lone halves included', () => {
    const sign = (n: number): number => Math.sign(n);
    const utf8Order = (a: string, b: string): number => Buffer.compare(Buffer.from(a), Buffer.from(b));
    // Few distinct characters, so that ids share prefixes, and every kind of UTF-16 unit among them.
    const unit = fc.constantFrom('a', 'b', '-', '\u00e9', '\ud7ff', '\ue000', '\uffff', '\ud83d', '\ude00');
    const id = fc.array(unit, { maxLength: 6 }).map((units) => units.join(''));
    fc.assert(
      fc.property(id, id, (a, b) => {
        assert.equal(
          sign(compareIds(a, b)),
          sign(utf8Order(a, b)),
          `${JSON.stringify(a)} ${JSON.stringify(b)}`,
        );
      }),
      { numRuns: 5_000 },
    );
    // U+E000 sorts below a code point past U+FFFF in UTF-8, above its surrogates in UTF-16.
    assert.ok(compareIds('\ue000', '\ud83d\ude00') < 0);
    assert.ok(compareIds('node-2', 'node-10') > 0);
    assert.ok(compareIds('n', 'n1') < 0);
  });
});
