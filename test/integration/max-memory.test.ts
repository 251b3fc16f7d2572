// The memory store's bound (`maxMemoryBytes`, `--max-memory`): Redis's `maxmemory`. With the
// `noeviction` policy, once the records take more than the bound, writes that add data are refused
// (OutOfMemory in the API, `-OOM` over RESP) while reads, deletes and expiry go on; deleting gives
// the room back. With `allkeys-lru` / `volatile-lru` (`maxMemoryPolicy`) the least recently used
// keys (of those with a TTL) are evicted to make room instead.

import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { getHeapStatistics } from 'node:v8';
import pino from 'pino';
import { ErrorKind, TesseraError } from '../../src/core/errors.js';
import {
  EVICTION_SAMPLE_KEYS,
  MEMORY_ENTRY_OVERHEAD_BYTES,
  WORKER_HEAP_HEADROOM_MB,
} from '../../src/core/limits.js';
import { recordBytes } from '../../src/core/record.js';
import { resolveConfig } from '../../src/main/config.js';
import { Tessera } from '../../src/main/node.js';
import { eventually, tempDir } from './helpers.js';
import { startResp } from './resp-helpers.js';

const MAX_BYTES = 64 * 1024;
const VALUE = Buffer.alloc(1000, 7);
const WORKERS = 2;
/** Each worker publishes its memory rounded up to a KiB. */
const ROUNDING_BYTES = WORKERS * 1024;

const isOutOfMemory = (err: unknown) =>
  err instanceof TesseraError && err.kind === ErrorKind.OutOfMemory && err.code === 'TESSERA_OUT_OF_MEMORY';

/** A memory-store node without peers, bounded at MAX_BYTES. */
function startBounded(
  options: {
    cleanIntervalMs?: number;
    maxMemoryPolicy?: 'allkeys-lru' | 'volatile-lru';
    workers?: number;
  } = {},
): Promise<Tessera> {
  return Tessera.start({
    store: 'memory',
    workers: WORKERS,
    fragments: 16,
    maxMemoryBytes: MAX_BYTES,
    logger: pino({ level: 'silent' }),
    ...options,
  });
}

describe('maxMemoryBytes: the embedded API', () => {
  test('puts are refused once the records take more than the bound; reads, deletes and expiry go on, and deleting gives the room back', async () => {
    const node = await startBounded();
    try {
      const accepted: string[] = [];
      let refusal: unknown;
      for (let i = 0; refusal === undefined; i++) {
        assert.ok(i < 1000, 'the bound never refused a put');
        const key = `key:${i}`;
        try {
          await node.put(key, VALUE);
          accepted.push(key);
        } catch (err) {
          refusal = err;
        }
      }
      assert.ok(isOutOfMemory(refusal), String(refusal));
      // Each acknowledged put is counted before its answer: the refusal came at the first put after
      // the records passed the bound, not later.
      const { usedBytes, maxBytes } = (await node.health()).memory;
      assert.equal(maxBytes, MAX_BYTES);
      const entryBytes =
        MEMORY_ENTRY_OVERHEAD_BYTES +
        'key:000'.length +
        recordBytes(Buffer.byteLength(node.nodeId), VALUE.length);
      assert.ok(usedBytes > MAX_BYTES, `used ${usedBytes}`);
      assert.ok(usedBytes <= MAX_BYTES + entryBytes + ROUNDING_BYTES, `used ${usedBytes}`);
      assert.ok(accepted.length >= MAX_BYTES / entryBytes, `accepted ${accepted.length}`);

      // Every accepted put is there; a put of the empty value and putMany are refused as well.
      for (const key of accepted) assert.deepEqual(await node.get(key), VALUE);
      await assert.rejects(node.put('another', ''), isOutOfMemory);
      const many = await node.putMany([
        ['m1', 'x'],
        ['m2', 'y'],
      ]);
      assert.ok(many.every((r) => !r.ok && isOutOfMemory(r.error)));
      assert.equal(await node.expire(accepted[0], 60_000), true);

      // On a node without peers a delete keeps no tombstone: it gives back all its entry took.
      for (const key of accepted.slice(0, 10)) assert.equal(await node.delete(key), true);
      const after = (await node.health()).memory.usedBytes;
      assert.ok(usedBytes - after >= 10 * entryBytes - ROUNDING_BYTES, `used ${usedBytes} → ${after}`);
      await node.put('fits-again', VALUE);
      assert.deepEqual(await node.get('fits-again'), VALUE);
    } finally {
      await node.close();
    }
  });

  test('a key space that churns (new keys written, then deleted or expired) never fills the bound on a node without peers', async () => {
    const node = await startBounded({ cleanIntervalMs: 20 });
    try {
      // Ten times the bound's worth of values, each deleted after its round.
      const perRound = 20;
      for (let round = 0; round < (10 * MAX_BYTES) / (perRound * VALUE.length); round++) {
        const keys = Array.from({ length: perRound }, (_, i) => `churn:${round}:${i}`);
        for (const key of keys) await node.put(key, VALUE);
        for (const key of keys) assert.equal(await node.delete(key), true);
      }
      assert.equal((await node.health()).memory.usedBytes, 0);
      // Values that expire: the cleaner's expiry tombstones are dropped the same way.
      for (let i = 0; i < 20; i++) await node.put(`expiring:${i}`, VALUE, { ttlMs: 1_000 });
      assert.ok((await node.health()).memory.usedBytes > 20 * VALUE.length);
      await eventually(async () => (await node.health()).memory.usedBytes === 0);
    } finally {
      await node.close();
    }
  });

  test('a worker that died starts its memory store empty, and the bound counts it so', async () => {
    const node = await Tessera.start({
      store: 'memory',
      workers: 1,
      fragments: 4,
      maxMemoryBytes: MAX_BYTES,
      logger: pino({ level: 'silent' }),
    });
    try {
      let i = 0;
      for (;;) {
        assert.ok(i < 1000, 'the bound never refused a put');
        const refused = await node.put(`key:${i++}`, VALUE).then(
          () => false,
          (err: unknown) => (isOutOfMemory(err) ? true : Promise.reject(err)),
        );
        if (refused) break;
      }
      node.debug.crashWorker(0);
      await eventually(async () => {
        const health = await node.health();
        return health.workers[0].state === 'ready' && health.workers[0].restarts >= 1;
      });
      assert.equal((await node.health()).memory.usedBytes, 0);
      await node.put('after-restart', VALUE);
      assert.deepEqual(await node.get('after-restart'), VALUE);
    } finally {
      await node.close();
    }
  });

  test("a worker's heap limit is raised to hold the bound, where V8's default is lower", async () => {
    const maxMemoryBytes = 2 * Number(getHeapStatistics().heap_size_limit);
    const node = await Tessera.start({
      store: 'memory',
      workers: 1,
      fragments: 4,
      maxMemoryBytes,
      logger: pino({ level: 'silent' }),
    });
    try {
      const [worker] = (await node.health()).workers;
      const expected = maxMemoryBytes + WORKER_HEAP_HEADROOM_MB * 1024 * 1024;
      assert.ok((worker.heapLimitBytes ?? 0) >= expected, `heap limit ${worker.heapLimitBytes}`);
    } finally {
      await node.close();
    }
  });

  test('the bound is for the memory store, and is checked as an option', async () => {
    const dir = await tempDir('max-memory');
    try {
      const invalid = (pattern: RegExp) => (err: unknown) =>
        err instanceof TesseraError && err.kind === ErrorKind.InvalidInput && pattern.test(err.message);
      await assert.rejects(
        Tessera.start({ store: 'lmdb', dataDir: dir.path, maxMemoryBytes: MAX_BYTES }),
        invalid(/maxMemoryBytes bounds the memory store; the lmdb store keeps its data on disk/),
      );
      await assert.rejects(
        Tessera.start({ store: 'memory', maxMemoryBytes: -1 }),
        invalid(/maxMemoryBytes must be an integer in 0\.\./),
      );
      await assert.rejects(
        Tessera.start({ store: 'memory', maxMemoryBytes: 1.5 }),
        invalid(/maxMemoryBytes must be an integer/),
      );
    } finally {
      await dir.cleanup();
    }
  });
});

describe('maxMemoryBytes over RESP', () => {
  test("commands that add data get Redis's OOM error; reads, DEL and EXPIRE are served; CONFIG GET and INFO show the bound", async () => {
    const resp = await startResp({
      label: 'max-memory-resp',
      node: { store: 'memory', workers: WORKERS, maxMemoryBytes: MAX_BYTES },
    });
    try {
      const redis = await resp.client();
      const oom = /^OOM command not allowed when used memory > 'maxmemory'\.$/;
      const value = VALUE.toString('latin1');
      let stored = 0;
      for (;;) {
        assert.ok(stored < 1000, 'the bound never refused a SET');
        try {
          await redis.set(`k${stored}`, value);
          stored++;
        } catch (err) {
          assert.match((err as Error).message, oom);
          break;
        }
      }
      assert.ok(stored > 0);
      for (const refused of [
        () => redis.set('other', 'x'),
        () => redis.incr('counter'),
        () => redis.append('k0', 'more'),
        () => redis.mset('a', '1', 'b', '2'),
        () => redis.setbit('bits', 7, 1),
        () => redis.copy('k0', 'k0-copy'),
      ]) {
        await assert.rejects(refused(), (err: Error) => oom.test(err.message));
      }
      assert.equal(await redis.get('k1'), value);
      assert.equal(await redis.exists('k0', 'k1'), 2);
      assert.equal(await redis.expire('k1', 100), 1);
      assert.deepEqual(await redis.config('GET', 'maxmemory'), ['maxmemory', String(MAX_BYTES)]);
      const info = await redis.info('memory');
      assert.match(info, new RegExp(`\\r\\nmaxmemory:${MAX_BYTES}\\r\\n`));
      const dataset = Number(/\r\nused_memory_dataset:(\d+)\r\n/.exec(info)?.[1]);
      assert.ok(dataset > MAX_BYTES, info);
      assert.equal(await redis.del(...Array.from({ length: 10 }, (_, i) => `k${i}`)), 10);
      assert.equal(await redis.set('room-again', value), 'OK');
    } finally {
      await resp.stop();
    }
  });
});

describe('maxMemoryPolicy: evicting to make room', () => {
  test('allkeys-lru: puts are never refused, the records stay within the bound, and a key in use survives', async () => {
    const node = await startBounded({ maxMemoryPolicy: 'allkeys-lru' });
    try {
      await node.put('hot', VALUE);
      // Ten bounds' worth of new keys, 'hot' read between every few of them.
      const keys = Array.from({ length: Math.floor((10 * MAX_BYTES) / VALUE.length) }, (_, i) => `key:${i}`);
      for (let i = 0; i < keys.length; i++) {
        await node.put(keys[i], VALUE);
        if (i % 4 === 0) assert.deepEqual(await node.get('hot'), VALUE);
        const { usedBytes } = (await node.health()).memory;
        assert.ok(usedBytes <= MAX_BYTES, `used ${usedBytes} after ${i + 1} puts`);
      }
      const { memory } = await node.health();
      assert.equal(memory.policy, 'allkeys-lru');
      const held = (await node.getMany(keys)).map((r) => r.ok && r.value !== undefined);
      const kept = held.filter(Boolean).length;
      assert.ok(kept > 0 && kept < keys.length / 4, `kept ${kept} of ${keys.length}`);
      assert.equal(memory.evictedKeys, keys.length - kept);
      // The oldest keys went, the newest stayed; the key in use stayed throughout.
      assert.equal(held[0], false);
      assert.equal(held[keys.length - 1], true);
      assert.deepEqual(await node.get('hot'), VALUE);
    } finally {
      await node.close();
    }
  });

  test('volatile-lru evicts only keys with a TTL, and refuses once none is left', async () => {
    // One worker: with several, each keeps its fragments to their share of the bound.
    const node = await startBounded({ maxMemoryPolicy: 'volatile-lru', workers: 1 });
    try {
      const persistent = Array.from({ length: 16 }, (_, i) => `persistent:${i}`);
      for (const key of persistent) await node.put(key, VALUE);
      // Keys with a TTL make room for each other...
      for (let i = 0; i < Math.floor((3 * MAX_BYTES) / VALUE.length); i++) {
        await node.put(`session:${i}`, VALUE, { ttlMs: 600_000 });
      }
      assert.ok((await node.health()).memory.evictedKeys > 0);
      for (const key of persistent) assert.deepEqual(await node.get(key), VALUE);
      // ...but never for a key without one: once the TTL keys are gone, puts are refused.
      let refusal: unknown;
      for (let i = 0; refusal === undefined; i++) {
        assert.ok(i < 1000, 'the bound never refused a put');
        try {
          await node.put(`more:${i}`, VALUE);
        } catch (err) {
          refusal = err;
        }
      }
      assert.ok(isOutOfMemory(refusal), String(refusal));
      for (const key of persistent) assert.deepEqual(await node.get(key), VALUE);
      const sessions = await node.scan({ prefix: 'session:' });
      assert.equal(sessions.entries.length, 0);
    } finally {
      await node.close();
    }
  });

  test('the policy is checked as an option: a known one, the memory store, no peers', () => {
    const invalid = (pattern: RegExp) => (err: unknown) =>
      err instanceof TesseraError && err.kind === ErrorKind.InvalidInput && pattern.test(err.message);
    assert.equal(resolveConfig({ store: 'memory' }).maxMemoryPolicy, 'noeviction');
    assert.equal(
      resolveConfig({ store: 'memory', maxMemoryPolicy: 'volatile-lru' }).maxMemoryPolicy,
      'volatile-lru',
    );
    assert.throws(
      () => resolveConfig({ store: 'memory', maxMemoryPolicy: 'allkeys-lfu' as 'allkeys-lru' }),
      invalid(
        /maxMemoryPolicy "allkeys-lfu" is not supported; it must be one of noeviction, allkeys-lru, volatile-lru/,
      ),
    );
    assert.throws(
      () => resolveConfig({ store: 'memory', maxMemoryPolicy: 'lru' as 'allkeys-lru' }),
      invalid(/maxMemoryPolicy "lru" is unknown/),
    );
    assert.throws(
      () => resolveConfig({ store: 'lmdb', maxMemoryPolicy: 'allkeys-lru' }),
      invalid(/maxMemoryPolicy evicts from the memory store; the lmdb store keeps its data on disk/),
    );
    assert.throws(
      () =>
        resolveConfig({
          store: 'memory',
          maxMemoryPolicy: 'allkeys-lru',
          nodeId: 'a',
          peers: 'a@127.0.0.1:7001,b@127.0.0.1:7002',
        }),
      invalid(/maxMemoryPolicy evicts only on a node without peers/),
    );
  });

  test('over RESP: SET is never refused under allkeys-lru; CONFIG GET and INFO show the policy and the evictions', async () => {
    const resp = await startResp({
      label: 'max-memory-policy-resp',
      node: { store: 'memory', workers: WORKERS, maxMemoryBytes: MAX_BYTES, maxMemoryPolicy: 'allkeys-lru' },
    });
    try {
      const redis = await resp.client();
      const value = VALUE.toString('latin1');
      const count = Math.floor((4 * MAX_BYTES) / VALUE.length);
      for (let i = 0; i < count; i++) assert.equal(await redis.set(`k${i}`, value), 'OK');
      assert.equal(await redis.incr('counter'), 1);
      assert.deepEqual(await redis.config('GET', 'maxmemory-policy'), ['maxmemory-policy', 'allkeys-lru']);
      assert.deepEqual(await redis.config('GET', 'maxmemory-samples'), [
        'maxmemory-samples',
        String(EVICTION_SAMPLE_KEYS),
      ]);
      assert.match(await redis.info('memory'), /\r\nmaxmemory_policy:allkeys-lru\r\n/);
      const evicted = Number(/\r\nevicted_keys:(\d+)\r\n/.exec(await redis.info('stats'))?.[1]);
      const kept = await redis.dbsize();
      assert.ok(evicted > 0, `evicted ${evicted}`);
      assert.equal(evicted + kept, count + 1);
      assert.equal(await redis.get(`k${count - 1}`), value);
      assert.equal(await redis.get('k0'), null);
    } finally {
      await resp.stop();
    }
  });
});
