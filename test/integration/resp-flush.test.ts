// FLUSHALL / FLUSHDB over RESP and `deleteAll` in the embedded API: every key live at the start is
// deleted (a tombstone each, so a replica or a restart cannot bring it back), the reply comes once
// they all are, and keys written afterwards are untouched.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { Redis } from 'ioredis';
import { Tessera } from '../../src/main/node.js';
import { tempDir } from './helpers.js';
import { type RespFixture, rejectsWith, startResp } from './resp-helpers.js';

const KEYS = 2500;

describe('FLUSHALL and FLUSHDB', () => {
  let fx: RespFixture;
  let r: Redis;

  before(async () => {
    fx = await startResp({ label: 'resp-flush' });
    r = await fx.client();
  });
  after(async () => {
    await fx.stop();
  });

  async function fill(prefix: string, count: number): Promise<void> {
    const pipeline = r.pipeline();
    for (let i = 0; i < count; i++) pipeline.set(`${prefix}:${i}`, `v${i}`);
    await pipeline.exec();
  }

  test('FLUSHALL deletes every key, across pages and fragments, and answers OK', async () => {
    await fill('a', KEYS);
    await r.set('ttl-key', 'v', 'EX', 100);
    assert.equal(await r.dbsize(), KEYS + 1);
    assert.equal(await r.flushall(), 'OK');
    assert.equal(await r.dbsize(), 0);
    assert.equal(await r.get('a:0'), null);
    assert.equal(await r.get(`a:${KEYS - 1}`), null);
    assert.equal(await r.exists('ttl-key'), 0);
    assert.equal(await r.set('a:0', 'again'), 'OK', 'the keyspace takes writes after the flush');
    assert.equal(await r.get('a:0'), 'again');
  });

  test('FLUSHDB, and both with ASYNC or SYNC, behave the same; other arguments are refused', async () => {
    for (const args of [['FLUSHDB'], ['FLUSHALL', 'ASYNC'], ['FLUSHDB', 'sync']]) {
      await fill('b', 50);
      assert.equal(await r.call(...(args as [string, ...string[]])), 'OK', args.join(' '));
      assert.equal(await r.dbsize(), 0, args.join(' '));
    }
    await r.set('kept', 'v');
    await rejectsWith(r.call('FLUSHALL', 'LATER'), 'ERR syntax error');
    await rejectsWith(r.call('FLUSHALL', 'ASYNC', 'SYNC'), 'ERR syntax error');
    assert.equal(await r.get('kept'), 'v', 'a refused flush deletes nothing');
  });
});

test('deleteAll: counts the live keys it deleted, and the deletes survive a restart', async () => {
  const dir = await tempDir('delete-all');
  try {
    let node = await Tessera.start({ store: 'lmdb', dataDir: dir.path, workers: 2, fragments: 16 });
    try {
      await node.putMany(Array.from({ length: 1200 }, (_, i) => [`k${i}`, `v${i}`] as const));
      await node.delete('k0');
      assert.equal(await node.deleteAll(), 1199, 'the already-deleted key is not counted');
      assert.equal(await node.deleteAll(), 0, 'nothing is left to delete');
      await node.put('after', 'v');
    } finally {
      await node.close();
    }
    node = await Tessera.start({ store: 'lmdb', dataDir: dir.path, workers: 2, fragments: 16 });
    try {
      assert.equal(await node.get('k1'), undefined);
      assert.equal(await node.get('k1199'), undefined);
      assert.deepEqual(await node.get('after'), Buffer.from('v'));
      const page = await node.scan({ limit: 10_000, keysOnly: true });
      assert.deepEqual(
        page.entries.map((e) => e.key.toString()),
        ['after'],
      );
    } finally {
      await node.close();
    }
  } finally {
    await dir.cleanup();
  }
});
