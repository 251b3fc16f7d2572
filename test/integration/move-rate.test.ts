// --move-rate on two embedded nodes: a node that joins with a small rate gains a copy of every
// fragment of a node holding about 4 MiB, and the copy takes at least the time the rate implies
// for what it pulls after it was first seen pulling (less the bucket's burst and the page of records
// each copying round may pull ahead; unlimited, the same copy takes well under half of it here);
// meanwhile `GET /cluster/moves` (Cluster.movesReport) shows each copy's bytesDone growing, what is
// left (bytesLeft, keysLeft: estimated from the size a reports of its copy) falling, and the rate.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { freePorts } from '../../bench/ports.js';
import { Keyspace } from '../../src/core/keyspace.js';
import {
  MOVE_RATE_BURST_MS,
  RECONCILE_PAGE_BYTES_MAX,
  RECONCILE_PAGE_RECORDS_MAX,
} from '../../src/core/limits.js';
import { RECORD_HEADER_BYTES } from '../../src/core/record.js';
import { Tessera } from '../../src/main/node.js';
import { CLUSTER_SECRET } from './cluster-helpers.js';
import { eventually, tempDir } from './helpers.js';

const FRAGMENTS = 2;
const RATE_BYTES_PER_SEC = 256 * 1024;
const VALUE = 'v'.repeat(256);
const KEYS = 14_000;
const WRITES_AT_ONCE = 100;
/** Deadline of every condition waited for: a loaded 2-core machine is slow, not wrong. */
const CONDITION_MS_MAX = 60_000;
/**
 * How far bytesDone + bytesLeft may be from the bytes a holds of the fragment, once something was
 * pulled: what is left is counted at the average size of what was pulled, and these records differ
 * by at most 3 bytes of ~280 (their keys' digits).
 */
const DONE_AND_LEFT_TOLERANCE = 0.03;
/** The same before anything was pulled, when bytesLeft is a's lmdb estimate (lmdb-store.ts fragmentSize). */
const SOURCE_ESTIMATE_BELOW = 0.2;
const SOURCE_ESTIMATE_ABOVE = 0.45;

/** One look at a copy in /cluster/moves while it was Bootstrapping. */
interface CopyShown {
  keysDone: number;
  bytesDone: number;
  keysLeft: number | null;
  bytesLeft: number | null;
}

test('a copy pulls at most --move-rate, and /cluster/moves shows its bytes growing and what is left falling', async () => {
  const dir = await tempDir('move-rate');
  const ports = await freePorts(2);
  const common = { clusterSecret: CLUSTER_SECRET, fragments: FRAGMENTS, workers: 1, replicas: 2 };
  const a = await Tessera.start({ ...common, nodeId: 'a', dataDir: `${dir.path}/a`, peerPort: ports[0] });
  let b: Tessera | undefined;
  try {
    let heldBytes = 0;
    let largestKeyBytes = 0;
    /** What a holds of each fragment: keys, and bytes as b pulls them. */
    const heldOf = Array.from({ length: FRAGMENTS }, () => ({ keys: 0, bytes: 0 }));
    const keyspace = new Keyspace(FRAGMENTS);
    const keys = Array.from({ length: KEYS }, (_, i) => `copied:${i}`);
    for (let i = 0; i < KEYS; i += WRITES_AT_ONCE)
      await Promise.all(keys.slice(i, i + WRITES_AT_ONCE).map((key) => a.put(key, VALUE)));
    for (const key of keys) {
      largestKeyBytes = Math.max(largestKeyBytes, key.length);
      // What b pulls of it: the key, and its record (header, writer's node id, value).
      const bytes = key.length + RECORD_HEADER_BYTES + 'a'.length + VALUE.length;
      heldBytes += bytes;
      const held = heldOf[keyspace.fragmentOf(Buffer.from(key))];
      held.keys++;
      held.bytes += bytes;
    }

    b = await Tessera.start({
      ...common,
      nodeId: 'b',
      dataDir: `${dir.path}/b`,
      peerPort: ports[1],
      join: `127.0.0.1:${ports[0]}`,
      moveRateBytesPerSec: RATE_BYTES_PER_SEC,
    });
    const joined = b;
    assert.equal(joined.cluster!.movesReport().moveRateBytesPerSec, RATE_BYTES_PER_SEC);
    const pulledBytes = (): number => {
      let bytes = 0;
      for (let f = 0; f < FRAGMENTS; f++) bytes += joined.dispatcher.pulledInto(f).bytes;
      return bytes;
    };
    // Each copy as /cluster/moves showed it while the fragment was Bootstrapping, each change once;
    // when b was first seen to have pulled something, and how much, and when all of it.
    const seen = new Map<number, CopyShown[]>();
    let first: { atMs: number; bytes: number } | undefined;
    let allAtMs: number | undefined;
    await eventually(() => {
      for (const f of joined.cluster!.movesReport().here) {
        if (f.state !== 'Bootstrapping') continue;
        const now: CopyShown = {
          keysDone: f.keysDone!,
          bytesDone: f.bytesDone!,
          keysLeft: f.keysLeft,
          bytesLeft: f.bytesLeft,
        };
        const shown = seen.get(f.fragment) ?? [];
        const last = shown.at(-1);
        if (last === undefined || last.bytesDone !== now.bytesDone || last.bytesLeft !== now.bytesLeft)
          shown.push(now);
        seen.set(f.fragment, shown);
      }
      const bytes = pulledBytes();
      if (first === undefined && bytes > 0) first = { atMs: Date.now(), bytes };
      if (allAtMs === undefined && bytes >= heldBytes) allAtMs = Date.now();
      const placement = joined.placementReport();
      return (
        allAtMs !== undefined &&
        placement.every((f) => f.replicas.includes('b') && f.state === 'Serving' && !f.moving)
      );
    }, CONDITION_MS_MAX);

    // Every byte a holds was pulled (once, unless a round was retried).
    assert.ok(pulledBytes() >= heldBytes, `pulled ${pulledBytes()} of ${heldBytes} bytes`);
    // What the rate paced: all but what was pulled when first seen, the bucket's burst, and the
    // page of records each copy running at once (one per fragment at most) pulls before it pays for it.
    const recordBytesMax = largestKeyBytes + RECORD_HEADER_BYTES + 1 + VALUE.length;
    const pageBytesMax = Math.min(
      RECONCILE_PAGE_RECORDS_MAX * recordBytesMax,
      RECONCILE_PAGE_BYTES_MAX + recordBytesMax,
    );
    const pacedBytes =
      heldBytes - first!.bytes - (RATE_BYTES_PER_SEC * MOVE_RATE_BURST_MS) / 1000 - FRAGMENTS * pageBytesMax;
    const leastMs = (pacedBytes * 1000) / RATE_BYTES_PER_SEC;
    assert.ok(leastMs >= 2_000, `the bound means something: ${leastMs} ms`);
    const copyMs = allAtMs! - first!.atMs;
    assert.ok(copyMs >= leastMs, `${heldBytes} bytes copied in ${copyMs} ms, the rate needs ${leastMs}`);

    // The copy's bytes grew while it ran (seen at least twice, rising), for some fragment; and what
    // was left fell as they grew.
    const rising = [...seen.values()].filter((shown) => {
      const done = shown.map((v) => v.bytesDone).filter((v, i, all) => i === 0 || v !== all[i - 1]);
      return done.length >= 2 && done.every((v, i) => i === 0 || v > done[i - 1]);
    });
    assert.ok(rising.length > 0, `bytesDone as shown: ${JSON.stringify([...seen])}`);
    for (const [fragment, shown] of seen) {
      const held = heldOf[fragment];
      const told = `fragment ${fragment} holding ${JSON.stringify(held)}, shown ${JSON.stringify(shown)}`;
      // Null only until a's first page said its size; from then on, shown.
      const heard = shown.findIndex((v) => v.bytesLeft !== null);
      assert.ok(heard !== -1, `what is left was shown: ${told}`);
      assert.ok(
        shown.slice(heard).every((v) => v.bytesLeft !== null),
        `once heard, never unknown: ${told}`,
      );
      for (const [i, v] of shown.entries()) {
        if (v.bytesLeft === null) continue;
        // a counts its keys exactly (lmdb).
        assert.equal(v.keysLeft, Math.max(0, held.keys - v.keysDone), told);
        const total = v.bytesDone + v.bytesLeft;
        if (v.keysDone === 0) {
          assert.ok(
            total >= held.bytes * (1 - SOURCE_ESTIMATE_BELOW) &&
              total <= held.bytes * (1 + SOURCE_ESTIMATE_ABOVE),
            `a's estimate: ${told}`,
          );
        } else {
          assert.ok(
            Math.abs(total - held.bytes) <= held.bytes * DONE_AND_LEFT_TOLERANCE,
            `done + left within ${DONE_AND_LEFT_TOLERANCE * 100} %: ${told}`,
          );
        }
        const before = shown[i - 1];
        if (before?.bytesLeft != null && v.bytesDone > before.bytesDone)
          assert.ok(v.bytesLeft < before.bytesLeft, `left falls as done rises: ${told}`);
      }
    }
  } finally {
    await Promise.allSettled([a.close(), b?.close()]);
    await dir.cleanup();
  }
});
