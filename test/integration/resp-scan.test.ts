// SCAN's guarantee over RESP (Redis's, which the README repeats for the embedded API): every key
// that exists for the whole iteration is returned at least once — here while other keys are written
// and deleted continuously and a worker crashes and restarts in the middle. Cursors live in the
// server's table (src/main/resp/scan-cursors.ts), so they survive the restart, can be retried, and
// can be continued from another connection; one never issued is an error, never a silent restart.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { Redis } from 'ioredis';
import { eventually, sleep } from './helpers.js';
import { type RespFixture, rejectsWith, startResp } from './resp-helpers.js';

const STABLE_KEYS = 3000;
/** Tries of one SCAN call while a worker restarts, 25 ms apart: far longer than a restart takes. */
const SCAN_TRIES_MAX = 400;

let fx: RespFixture;
let r: Redis;

before(async () => {
  fx = await startResp({ label: 'resp-scan' });
  r = await fx.client();
  for (let first = 0; first < STABLE_KEYS; first += 500) {
    const pairs: string[] = [];
    for (let i = first; i < first + 500; i++) pairs.push(`stable:${i}`, `v${i}`);
    await r.mset(...pairs);
  }
});

after(async () => {
  await fx.stop();
});

type ScanReply = [cursor: string, keys: string[]];

/** One SCAN call, retried with the same cursor while it fails (a worker restarting). */
async function scanPage(client: Redis, args: string[], errors: string[]): Promise<ScanReply> {
  for (let attempt = 1; ; attempt++) {
    try {
      return (await client.call('SCAN', ...args)) as ScanReply;
    } catch (err) {
      errors.push(err instanceof Error ? err.message : String(err));
      if (attempt >= SCAN_TRIES_MAX) throw err;
      await sleep(25);
    }
  }
}

/** Writes and deletes `churn:*` keys until `stop()` is called; failures (during a restart) are counted. */
function churn(client: Redis): { stop: () => Promise<number> } {
  let running = true;
  let failures = 0;
  const loop = (async () => {
    for (let round = 0; running; round++) {
      const pipeline = client.pipeline();
      for (let i = 0; i < 20; i++) {
        const key = `churn:${(round * 20 + i) % 2000}`;
        if (i % 3 === 2) pipeline.del(key);
        else pipeline.set(key, `r${round}`);
      }
      const results = (await pipeline.exec()) ?? [];
      failures += results.filter(([error]) => error !== null).length;
    }
  })();
  return {
    async stop() {
      running = false;
      await loop;
      return failures;
    },
  };
}

describe('SCAN under concurrent writes and a worker restart', () => {
  test('every stable key is returned at least once while keys churn and a worker crashes mid-iteration', async (t) => {
    const writer = await fx.client();
    const churning = churn(writer);
    const seen = new Set<string>();
    const errors: string[] = [];
    const crashAtPage = 20;
    let cursor = '0';
    let pages = 0;
    let churnFailures = 0;
    try {
      do {
        if (pages === crashAtPage) fx.node.debug.crashWorker(0);
        const [next, keys] = await scanPage(r, [cursor, 'COUNT', '50'], errors);
        for (const key of keys) seen.add(key);
        cursor = next;
        pages++;
        assert.ok(pages < 10_000, 'the iteration ends');
      } while (cursor !== '0');
    } finally {
      churnFailures = await churning.stop();
    }
    t.diagnostic(
      `${pages} pages, ${errors.length} SCAN retries (${errors[0] ?? 'none'}), ${churnFailures} failed writes`,
    );
    assert.ok(pages > crashAtPage, `the crash came mid-iteration (${pages} pages)`);
    const missing: string[] = [];
    for (let i = 0; i < STABLE_KEYS; i++) if (!seen.has(`stable:${i}`)) missing.push(`stable:${i}`);
    assert.deepEqual(
      missing,
      [],
      `missing after ${pages} pages; SCAN errors: ${errors.slice(0, 3).join(' | ')}`,
    );
    await eventually(async () => {
      const health = await fx.node.health();
      return health.workers[0].restarts >= 1 && health.workers[0].state === 'ready';
    });
    assert.equal(await r.get('stable:0'), 'v0', 'the restarted worker serves its fragments');
  });

  test('SCAN MATCH returns every matching stable key and no other while keys churn', async () => {
    const writer = await fx.client();
    const churning = churn(writer);
    const seen = new Set<string>();
    const errors: string[] = [];
    let cursor = '0';
    try {
      do {
        const [next, keys] = await scanPage(r, [cursor, 'MATCH', 'stable:1*', 'COUNT', '100'], errors);
        for (const key of keys) {
          assert.match(key, /^stable:1/);
          seen.add(key);
        }
        cursor = next;
      } while (cursor !== '0');
    } finally {
      await churning.stop();
    }
    const expected = Array.from({ length: STABLE_KEYS }, (_, i) => `stable:${i}`).filter((k) =>
      k.startsWith('stable:1'),
    );
    assert.deepEqual([...seen].sort(), expected.sort());
  });
});

describe('SCAN cursors', () => {
  test('a cursor can be retried, and continued from another connection', async () => {
    const [cursor, first] = (await r.call('SCAN', '0', 'MATCH', 'stable:*', 'COUNT', '100')) as ScanReply;
    assert.notEqual(cursor, '0');
    const again = (await r.call('SCAN', cursor, 'MATCH', 'stable:*', 'COUNT', '100')) as ScanReply;
    const other = await fx.client();
    const elsewhere = (await other.call('SCAN', cursor, 'MATCH', 'stable:*', 'COUNT', '100')) as ScanReply;
    // Each page hands out a fresh cursor id, so only the keys are compared.
    assert.deepEqual(elsewhere[1], again[1], 'the same cursor gives the same keys on any connection');
    assert.ok(again[1].length > 0);
    for (const key of again[1]) assert.ok(!first.includes(key), `${key} is not repeated from the first page`);
  });

  test('a garbage cursor answers ERR invalid cursor', async () => {
    for (const cursor of ['abc', '-1', '1.5', '', ' 1', '01', '123456789012345678901']) {
      await rejectsWith(r.call('SCAN', cursor), 'ERR invalid cursor');
    }
  });

  test('a well-formed cursor that was never issued is an error, not a restart from 0', async () => {
    for (const cursor of ['999999999', '18446744073709551615']) {
      await rejectsWith(
        r.call('SCAN', cursor),
        'ERR invalid cursor: it has expired or was never issued; restart the iteration from 0',
      );
    }
  });
});

describe('SCAN while a worker cannot commit', () => {
  test('SCAN, KEYS, DBSIZE and INFO answer with what the node holds, its writes not yet committed too', async () => {
    const failing = Array.from({ length: 40 }, (_, i) => `failing:${i}`);
    fx.node.debug.failCommits(0, 1_000_000);
    try {
      // Writes to worker 0's fragments stay pending (over LevelDB answered with the storage error;
      // over lmdb acknowledged once logged, their commit failing after).
      await Promise.allSettled(failing.map((k) => r.set(k, `${k}-v`)));
      await eventually(async () => /aof_last_write_status:err/.test(await r.info('persistence')));
      const pending = [];
      for (const k of failing) if ((await r.get(k)) !== null) pending.push(k);
      assert.equal(pending.length, failing.length, 'every write is readable, committed or not');
      const scanned = new Set<string>();
      let cursor = '0';
      do {
        const [next, keys] = (await r.call('SCAN', cursor, 'COUNT', '500')) as ScanReply;
        for (const k of keys) scanned.add(k);
        cursor = next;
      } while (cursor !== '0');
      for (let i = 0; i < STABLE_KEYS; i++) assert.ok(scanned.has(`stable:${i}`), `SCAN lists stable:${i}`);
      for (const k of failing) assert.ok(scanned.has(k), `SCAN lists ${k}`);
      assert.deepEqual((await r.keys('failing:*')).sort(), [...failing].sort());
      assert.ok(Number(await r.dbsize()) >= STABLE_KEYS);
    } finally {
      fx.node.debug.failCommits(0, 0);
    }
    // Once commits succeed again the pending writes reach the store, and go.
    await eventually(async () => (await r.info('persistence')).includes('aof_last_write_status:ok'));
    await r.del(...failing);
  });
});
