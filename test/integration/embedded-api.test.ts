// The embedded API on 2 workers × 16 fragments, against each store (DESIGN.md "Faces: Embedded";
// spec §1.1, §2.4–2.9, §8).

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { ErrorKind, TesseraError } from '../../src/core/errors.js';
import { COMMIT_ATTEMPTS_MAX, KEY_BYTES_MAX, PUBSUB_PAYLOAD_BYTES_MAX } from '../../src/core/limits.js';
import { Tessera } from '../../src/main/node.js';
import type { PubSubMessage } from '../../src/main/pubsub.js';
import { eventually, STORES, sleep, tempDir, withNode } from './helpers.js';

const isKind = (kind: ErrorKind) => (err: unknown) => err instanceof TesseraError && err.kind === kind;
/** A deadline far enough ahead that a value is certainly still there when the test looks. */
const LONG_TTL_MS = 60_000;

for (const store of STORES) {
  describe(`embedded API on ${store}`, () => {
    let node: Tessera;
    let dir: Awaited<ReturnType<typeof tempDir>>;

    before(async () => {
      dir = await tempDir(`api-${store}`);
      node = await Tessera.start({ store, dataDir: dir.path, workers: 2, fragments: 16 });
    });
    after(async () => {
      await node.close();
      await dir.cleanup();
    });

    test('put, get, delete', async () => {
      await node.put('alpha', 'one');
      assert.equal((await node.get('alpha'))?.toString(), 'one');
      await node.put('alpha', 'two');
      assert.equal((await node.get('alpha'))?.toString(), 'two');
      assert.equal(await node.delete('alpha'), true, 'a live value existed');
      assert.equal(await node.get('alpha'), undefined);
      assert.equal(await node.delete('alpha'), false, 'deleting again finds nothing live');
      assert.equal(await node.get('never-written'), undefined);
    });

    test('binary-safe keys and values, the empty key and the longest key', async () => {
      const key = Buffer.from([0, 255, 13, 10, 0]);
      const value = Buffer.from([0, 1, 2, 255, 0, 10]);
      await node.put(key, value);
      assert.deepEqual(await node.get(key), value);
      await node.put('', 'empty key');
      assert.equal((await node.get(''))?.toString(), 'empty key');
      await node.put('k', '');
      assert.deepEqual(await node.get('k'), Buffer.alloc(0), 'an empty value is a value');
      const longest = 'x'.repeat(KEY_BYTES_MAX);
      await node.put(longest, 'long');
      assert.equal((await node.get(longest))?.toString(), 'long');
      const big = Buffer.alloc(1024 * 1024, 7);
      await node.put('big', big);
      assert.deepEqual(await node.get('big'), big);
    });

    test('bad input is a typed InvalidInput error and nothing is written', async () => {
      await assert.rejects(node.put('x'.repeat(KEY_BYTES_MAX + 1), 'v'), isKind(ErrorKind.InvalidInput));
      await assert.rejects(node.put('too-big', Buffer.alloc(4 * 1024 * 1024 + 1)), /valueBytesMax/);
      await assert.rejects(node.put('ttl', 'v', { ttlMs: 0 }), isKind(ErrorKind.InvalidInput));
      await assert.rejects(node.put('ttl', 'v', { ttlMs: 1.5 }), isKind(ErrorKind.InvalidInput));
      await assert.rejects(
        node.put('ttl', 'v', { ttlMs: 5, expiresAtMs: Date.now() + 5 }),
        isKind(ErrorKind.InvalidInput),
      );
      // @ts-expect-error: an unknown durability from untyped callers
      await assert.rejects(node.put('d', 'v', { durability: 'eventually' }), /durability must be one of/);
      // @ts-expect-error: a number is neither a string nor bytes
      await assert.rejects(node.put(42, 'v'), isKind(ErrorKind.InvalidInput));
      assert.equal(await node.get('ttl'), undefined);
      assert.equal(await node.get('too-big'), undefined);
    });

    test('getEntry reports the version and deadline', async () => {
      const before = Date.now();
      await node.put('versioned', 'v', { ttlMs: 60_000 });
      const entry = await node.getEntry('versioned');
      assert.ok(entry);
      assert.equal(entry.value.toString(), 'v');
      assert.equal(entry.nodeId, node.nodeId);
      assert.ok(entry.wallMs >= before && entry.wallMs <= Date.now());
      assert.ok(entry.expiresAtMs >= before + 60_000 && entry.expiresAtMs <= Date.now() + 60_000);
    });

    test('TTL: a value disappears at its deadline; ttl() follows Redis PTTL', async () => {
      // A deadline a minute away is certainly still ahead when ttl() is asked.
      await node.put('long', 'v', { ttlMs: LONG_TTL_MS });
      const left = await node.ttl('long');
      assert.ok(left > 0 && left <= LONG_TTL_MS, `ttl ${left}`);
      assert.equal(await node.ttl('alpha'), -2, 'missing key');
      await node.put('forever', 'v');
      assert.equal(await node.ttl('forever'), -1, 'no expiry');
      await node.put('short', 'v', { ttlMs: 150 });
      await eventually(async () => (await node.get('short')) === undefined);
      assert.equal(await node.ttl('short'), -2);
    });

    test('an absolute deadline in the past is Expired and the key stays absent', async () => {
      await node.put('late', 'old value');
      await assert.rejects(
        node.put('late', 'v', { expiresAtMs: Date.now() - 1000 }),
        isKind(ErrorKind.Expired),
      );
      assert.equal(await node.get('late'), undefined, 'the expiry tombstone replaced the older value');
    });

    test('expire sets a deadline on an existing key only', async () => {
      await node.put('to-expire', 'v');
      assert.equal(await node.expire('to-expire', LONG_TTL_MS), true);
      assert.equal(await node.expire('no-such-key', 100), false);
      const left = await node.ttl('to-expire');
      assert.ok(left > 0 && left <= LONG_TTL_MS, `ttl ${left}`);
      await node.put('to-expire-soon', 'v');
      assert.equal(await node.expire('to-expire-soon', 100), true);
      await eventually(async () => (await node.get('to-expire-soon')) === undefined);
    });

    test('putMany / getMany keep input order with an error per position', async () => {
      const entries: Array<[string, string | Buffer]> = [
        ['m1', 'a'],
        ['m2', Buffer.alloc(5 * 1024 * 1024)],
        ['m3', 'c'],
      ];
      const puts = await node.putMany(entries);
      assert.deepEqual(
        puts.map((r) => r.ok),
        [true, false, true],
      );
      assert.ok(!puts[1].ok && puts[1].error.kind === ErrorKind.InvalidInput);
      const gets = await node.getMany(['m3', 'x'.repeat(2000), 'm1', 'm2']);
      assert.ok(gets[0].ok && gets[0].value?.toString() === 'c');
      assert.ok(!gets[1].ok && gets[1].error.kind === ErrorKind.InvalidInput);
      assert.ok(gets[2].ok && gets[2].value?.toString() === 'a');
      assert.ok(gets[3].ok && gets[3].value === undefined);
    });

    test('scan pages with a cursor return every key once, across fragments', async () => {
      const keys = Array.from({ length: 500 }, (_, i) => `scan:${String(i).padStart(4, '0')}`);
      await node.putMany(keys.map((k) => [k, `v-${k}`]));
      await node.delete('scan:0007');
      const seen: string[] = [];
      let cursor: string | undefined;
      let pages = 0;
      do {
        const page = await node.scan({ prefix: 'scan:', cursor, limit: 37 });
        assert.ok(page.entries.length <= 37);
        for (const e of page.entries) {
          assert.equal(e.value?.toString(), `v-${e.key.toString()}`);
          seen.push(e.key.toString());
        }
        cursor = page.cursor;
        pages++;
      } while (cursor !== undefined);
      assert.ok(pages > 1);
      const expected = keys.filter((k) => k !== 'scan:0007');
      assert.deepEqual([...seen].sort(), expected);
    });

    test('scan by range, by pattern, keys only', async () => {
      const collect = async (opts: Parameters<Tessera['scan']>[0]) => {
        const out: string[] = [];
        let cursor: string | undefined;
        do {
          const page = await node.scan({ ...opts, cursor });
          for (const e of page.entries) out.push(e.key.toString());
          cursor = page.cursor;
        } while (cursor !== undefined);
        return out.sort();
      };
      const range = await collect({ start: 'scan:0100', end: 'scan:0110' });
      assert.deepEqual(
        range,
        Array.from({ length: 10 }, (_, i) => `scan:${String(100 + i).padStart(4, '0')}`),
      );
      const matched = await collect({ match: 'scan:04[0-2]?', limit: 7 });
      assert.equal(matched.length, 30);
      assert.ok(matched.every((k) => /^scan:04[0-2]\d$/.test(k)));
      const page = await node.scan({ prefix: 'scan:01', keysOnly: true, limit: 5 });
      assert.ok(page.entries.every((e) => e.value === undefined));
      await assert.rejects(node.scan({ cursor: '!!' }), isKind(ErrorKind.InvalidInput));
      await assert.rejects(node.scan({ prefix: 'a', start: 'b' }), isKind(ErrorKind.InvalidInput));
    });

    test('scan with expiry gives each key its deadline, with or without values', async () => {
      const deadline = Date.now() + 600_000;
      await node.put('dl:a', 'x', { expiresAtMs: deadline });
      await node.put('dl:b', 'y');
      const entries = async (opts: Parameters<Tessera['scan']>[0]) =>
        (await node.scan(opts)).entries
          .map((e) => [e.key.toString(), e.value?.toString(), e.expiresAtMs])
          .sort((a, b) => String(a[0]).localeCompare(String(b[0])));
      for (const keysOnly of [true, false]) {
        const x = keysOnly ? undefined : 'x';
        const y = keysOnly ? undefined : 'y';
        const want = [
          ['dl:a', x, deadline],
          ['dl:b', y, 0],
        ];
        assert.deepEqual(await entries({ prefix: 'dl:', expiry: true, keysOnly }), want);
        // A pattern over the whole keyspace (read by the background pool on lmdb).
        assert.deepEqual(await entries({ match: 'dl:*', expiry: true, keysOnly }), want);
      }
      const plain = await node.scan({ prefix: 'dl:', keysOnly: true });
      assert.ok(plain.entries.every((e) => e.expiresAtMs === undefined));
    });

    test('backup copies every acknowledged write while writes go on (memory refuses)', async () => {
      const target = await tempDir(`backup-${store}`);
      try {
        if (store === 'memory') {
          await assert.rejects(node.backup(`${target.path}/copy`), isKind(ErrorKind.InvalidInput));
          return;
        }
        // Acknowledged at every level.
        for (const durability of ['memory', 'store', 'stable'] as const) {
          await node.putMany(
            Array.from({ length: 300 }, (_, i) => [`bk:${durability}:${i}`, `v${i}`] as const),
            { durability },
          );
        }
        await node.put('bk:gone', 'x');
        await node.delete('bk:gone');
        let writing = true;
        let during = 0;
        const writer = (async () => {
          while (writing) await node.put(`bk:during:${during++}`, 'd');
        })();
        const report = await node.backup(`${target.path}/copy`);
        writing = false;
        await writer;
        assert.equal(report.path, `${target.path}/copy`);
        assert.ok(report.bytes > 0);
        await node.put('bk:after', 'x');
        await assert.rejects(node.backup(`${target.path}/copy`), isKind(ErrorKind.InvalidInput), 'not empty');
        await assert.rejects(node.backup(`${dir.path}/inside`), isKind(ErrorKind.InvalidInput), 'inside');
        const restored = await Tessera.start({ store, dataDir: report.path, workers: 1, fragments: 16 });
        try {
          assert.equal(restored.nodeId, node.nodeId);
          for (const durability of ['memory', 'store', 'stable'] as const) {
            const values = await restored.getMany(
              Array.from({ length: 300 }, (_, i) => `bk:${durability}:${i}`),
            );
            assert.ok(
              values.every((v, i) => v.ok && v.value?.toString() === `v${i}`),
              durability,
            );
          }
          assert.equal(await restored.get('bk:gone'), undefined);
          assert.equal(await restored.get('bk:after'), undefined, 'written after the backup');
          assert.ok(during > 0, 'writes went on during the backup');
        } finally {
          await restored.close();
        }
      } finally {
        await target.cleanup();
      }
    });

    test('durability per request and flush', async () => {
      await node.put('mem', 'v', { durability: 'memory' });
      await node.put('sto', 'v', { durability: 'store' });
      await node.put('sta', 'v', { durability: 'stable' });
      await node.flush();
      for (const k of ['mem', 'sto', 'sta']) assert.equal((await node.get(k))?.toString(), 'v');
    });

    test('priorities: every class is served; background is rate-limited, not dropped', async () => {
      await node.put('p-high', 'h', { priority: 'high' });
      await node.put('p-bg', 'b', { priority: 'background' });
      assert.equal((await node.get('p-high', { priority: 'high' }))?.toString(), 'h');
      assert.equal((await node.get('p-bg', { priority: 'background' }))?.toString(), 'b');
    });

    test('health reports every fragment on its worker', async () => {
      const h = await node.health();
      assert.equal(h.nodeId, node.nodeId);
      assert.equal(h.store, store);
      assert.equal(h.workers.length, 2);
      assert.ok(h.workers.every((w) => w.state === 'ready'));
      assert.deepEqual(
        h.fragments.map((f) => f.fragment),
        Array.from({ length: 16 }, (_, i) => i),
      );
      assert.ok(h.fragments.reduce((n, f) => n + f.writes, 0) > 0);
    });
  });
}

test('a backup commits memory-durability writes that are still waiting for their commit', async () => {
  await withNode(
    'backup-uncommitted',
    { store: 'lmdb', workers: 1, fragments: 4, durability: 'memory', flushIntervalMs: 600_000 },
    async (node) => {
      await node.putMany(Array.from({ length: 100 }, (_, i) => [`w:${i}`, `v${i}`] as const));
      const target = await tempDir('backup-uncommitted-copy');
      try {
        const report = await node.backup(`${target.path}/copy`);
        const restored = await Tessera.start({
          store: 'lmdb',
          dataDir: report.path,
          workers: 1,
          fragments: 4,
        });
        try {
          const values = await restored.getMany(Array.from({ length: 100 }, (_, i) => `w:${i}`));
          assert.ok(values.every((v, i) => v.ok && v.value?.toString() === `v${i}`));
        } finally {
          await restored.close();
        }
      } finally {
        await target.cleanup();
      }
    },
  );
});

describe('the request ring', () => {
  test("requests that cross the ring's end, small and large, arrive intact", async () => {
    // A 64 KiB value limit keeps the ring at its minimum (8 MiB); ~13 MiB of requests wrap it.
    const options = { store: 'lmdb', workers: 1, fragments: 4, valueBytesMax: 64 * 1024 } as const;
    await withNode('ring-wrap', options, async (node) => {
      const count = 12_000;
      // Lengths that never line records up the same way twice; every 997th value goes alone.
      const valueAt = (i: number) =>
        Buffer.alloc(i % 997 === 0 ? 40 * 1024 : 700 + ((i * 37) % 613), i % 251);
      for (let start = 0; start < count; start += 2000) {
        const batch = [];
        for (let i = start; i < start + 2000; i++) batch.push(node.put(`wrap:${i}`, valueAt(i)));
        await Promise.all(batch);
      }
      for (let start = 0; start < count; start += 1000) {
        const keys = Array.from({ length: 1000 }, (_, j) => `wrap:${start + j}`);
        const got = await node.getMany(keys);
        got.forEach((r, j) => {
          assert.ok(r.ok, `wrap:${start + j}`);
          assert.deepEqual(r.value, valueAt(start + j), `wrap:${start + j}`);
        });
      }
    });
  });
});

describe('Pub/Sub', () => {
  test('listeners get channel, pattern and shard messages as copies, in publish order, until they unsubscribe', async () => {
    await withNode('pubsub', { store: 'memory', workers: 1, fragments: 4 }, async (node) => {
      const got: string[] = [];
      const show = (m: PubSubMessage) =>
        `${m.shard ? 's' : ''}${m.pattern === undefined ? '' : `${m.pattern}|`}${m.channel}=${m.message.toString('hex')}`;
      const first = node.subscribe({ channels: ['news', Buffer.from([0xff])], patterns: ['n*'] }, (m) =>
        got.push(show(m)),
      );
      const second = node.subscribe({ shardChannels: ['news'] }, (m) => got.push(`second:${show(m)}`));
      const payload = Buffer.from('hello');
      assert.equal(node.publish('news', payload), 2, 'the channel and the pattern');
      // The listener has its own copy: the publisher may reuse its buffer at once.
      payload.fill(0);
      assert.equal(node.publish(Buffer.from([0xff]), Buffer.from([0, 1])), 1);
      assert.equal(node.publish('news', 'shard', { shard: true }), 1, 'shard channels are apart');
      assert.equal(node.publish('nobody', 'x'), 1, 'the pattern alone');
      assert.equal(got.length, 0, 'listeners run after the publish returns');
      await eventually(async () => got.length === 5);
      assert.deepEqual(got, [
        'news=68656c6c6f',
        'n*|news=68656c6c6f',
        `${Buffer.from([0xff])}=0001`,
        'second:snews=7368617264',
        'n*|nobody=78',
      ]);
      first();
      second();
      assert.equal(node.publish('news', 'later'), 0);
      assert.equal(node.publish('news', 'later', { shard: true }), 0);
      // A listener may publish: the message it sends is delivered after the one it is handling.
      const chain: string[] = [];
      const unsubscribe = node.subscribe({ channels: ['ping', 'pong'] }, (m) => {
        chain.push(`${m.channel}`);
        if (`${m.channel}` === 'ping') node.publish('pong', 'back');
      });
      node.publish('ping', 'x');
      await eventually(async () => chain.length === 2);
      assert.deepEqual(chain, ['ping', 'pong']);
      unsubscribe();
    });
  });

  test('bad input is a typed error; after close nothing is published', async () => {
    const dir = await tempDir('pubsub-close');
    const node = await Tessera.start({ store: 'memory', dataDir: dir.path, workers: 1, fragments: 4 });
    try {
      assert.throws(() => node.publish('c', 42 as unknown as string), isKind(ErrorKind.InvalidInput));
      assert.throws(
        () => node.publish('c', Buffer.alloc(PUBSUB_PAYLOAD_BYTES_MAX)),
        isKind(ErrorKind.InvalidInput),
      );
      assert.throws(
        () => node.subscribe({ channels: [7 as unknown as string] }, () => {}),
        isKind(ErrorKind.InvalidInput),
      );
    } finally {
      await node.close();
      await dir.cleanup();
    }
    assert.throws(() => node.publish('c', 'm'), isKind(ErrorKind.ShuttingDown));
    assert.throws(() => node.subscribe({ channels: ['c'] }, () => {}), isKind(ErrorKind.ShuttingDown));
  });
});

describe('admission', () => {
  test('a full fragment queue answers Backpressure, never an unbounded wait', async () => {
    const node = await Tessera.start({ store: 'memory', workers: 1, fragments: 1, queueOpsMax: 4 });
    try {
      // A plain put newer than everything stored is applied on arrival and never queues; a delete
      // reports whether the key held a value, so it is queued to read first.
      const results = await Promise.allSettled(Array.from({ length: 200 }, (_, i) => node.delete(`k${i}`)));
      const shed = results.filter((r) => r.status === 'rejected' && isKind(ErrorKind.Backpressure)(r.reason));
      const ok = results.filter((r) => r.status === 'fulfilled');
      assert.ok(shed.length > 0, 'some writes were shed');
      assert.ok(ok.length >= 4, 'the queue admitted its capacity');
      assert.equal(shed.length + ok.length, 200, 'every write ended one way or the other');
      const h = await node.health();
      assert.equal(h.fragments[0].shed[1], shed.length);
    } finally {
      await node.close();
    }
  });

  test('close stops admission with ShuttingDown, finishes admitted work, and is idempotent', async () => {
    const dir = await tempDir('close');
    const node = await Tessera.start({ store: 'lmdb', dataDir: dir.path, workers: 2, fragments: 16 });
    const admitted = Array.from({ length: 500 }, (_, i) => node.put(`c${i}`, 'v'));
    const closing = node.close();
    await assert.rejects(node.put('late', 'v'), isKind(ErrorKind.ShuttingDown));
    await assert.rejects(node.get('c1'), isKind(ErrorKind.ShuttingDown));
    await assert.rejects(node.scan(), isKind(ErrorKind.ShuttingDown));
    const results = await Promise.allSettled(admitted);
    assert.ok(
      results.every((r) => r.status === 'fulfilled'),
      'admitted writes complete',
    );
    await closing;
    await node.close();
    const reopened = await Tessera.start({ store: 'lmdb', dataDir: dir.path, workers: 2, fragments: 16 });
    try {
      assert.equal((await reopened.get('c499'))?.toString(), 'v');
    } finally {
      await reopened.close();
      await dir.cleanup();
    }
  });

  test('invalid options are refused with a message naming the option', async () => {
    await assert.rejects(
      Tessera.start({ store: 'memory', fragments: 0 }),
      /fragments must be an integer in 1\.\.16384/,
    );
    await assert.rejects(Tessera.start({ store: 'memory', workers: 0 }), /workers must be an integer/);
    // @ts-expect-error: an unknown store kind from untyped callers
    await assert.rejects(Tessera.start({ store: 'rocksdb' }), /store must be one of lmdb, level, memory/);
    // @ts-expect-error: an unknown option
    await assert.rejects(Tessera.start({ store: 'memory', fragmnets: 4 }), /unknown option "fragmnets"/);
    await assert.rejects(Tessera.start({ store: 'memory', nodeId: '' }), /nodeId must be 1\.\.255 bytes/);
    await assert.rejects(
      Tessera.start({ store: 'memory', valueBytesMax: 64 * 1024 * 1024 }),
      /valueBytesMax/,
    );
    await assert.rejects(
      Tessera.start({ store: 'memory', cleanKeysPerSec: 0 }),
      /cleanKeysPerSec must be an integer/,
    );
  });
});

describe('failed commits', () => {
  test('a failed commit is retried and its writes wait for the retry; after three failures in a row they get the error, and still land', async () => {
    // LevelDB: a write waits for its commit. (Over lmdb's write-ahead log it waits for its append:
    // the next test.)
    const dir = await tempDir('commit-retry');
    const options = { store: 'level', dataDir: dir.path, workers: 1, fragments: 4 } as const;
    try {
      let node = await Tessera.start(options);
      try {
        node.debug.failCommits(0, 2);
        await node.put('retried', 'one');
        node.debug.failCommits(0, 3);
        await assert.rejects(
          node.put('failed', 'two'),
          (err: unknown) =>
            err instanceof TesseraError && err.kind === ErrorKind.Storage && /test hook/.test(err.message),
        );
        await node.flush();
        await node.put('after', 'three');
      } finally {
        await node.close();
      }
      node = await Tessera.start(options);
      try {
        assert.equal((await node.get('retried'))?.toString(), 'one');
        assert.equal(
          (await node.get('failed'))?.toString(),
          'two',
          'a write answered with the error, applied by a later retry',
        );
        assert.equal((await node.get('after'))?.toString(), 'three');
      } finally {
        await node.close();
      }
    } finally {
      await dir.cleanup();
    }
  });

  test("over lmdb's write-ahead log a logged write is acknowledged while its commit fails, and lands when one succeeds or at the next start", async () => {
    const dir = await tempDir('commit-retry-logged');
    const options = { store: 'lmdb', dataDir: dir.path, workers: 1, fragments: 4 } as const;
    try {
      let node = await Tessera.start(options);
      try {
        node.debug.failCommits(0, 2);
        await node.put('retried', 'one');
        node.debug.failCommits(0, 1_000_000);
        await node.put('logged', 'two');
      } finally {
        // The store never took it: it is only in the log, and the close reports the failing commits.
        await assert.rejects(node.close(), isKind(ErrorKind.Storage));
      }
      node = await Tessera.start(options);
      try {
        assert.equal((await node.get('retried'))?.toString(), 'one');
        assert.equal((await node.get('logged'))?.toString(), 'two', 'replayed from the log');
      } finally {
        await node.close();
      }
    } finally {
      await dir.cleanup();
    }
  });

  for (const store of ['level', 'lmdb'] as const) {
    test(`while commits keep failing on ${store}, writes are refused at once and reads go on; health shows it; the first commit that succeeds ends it`, async () => {
      const dir = await tempDir(`commit-failing-${store}`);
      const node = await Tessera.start({ store, dataDir: dir.path, workers: 1, fragments: 1 });
      const failures = async () => (await node.health()).fragments[0].commitFailures;
      try {
        await node.put('kept', 'before');
        node.debug.failCommits(0, 1_000_000);
        const waited = node.put('waited', 'x');
        // LevelDB answers it with the error once three commits failed; lmdb once it is logged.
        if (store === 'level') await assert.rejects(waited, isKind(ErrorKind.Storage));
        else await waited;
        await eventually(async () => (await failures()) >= COMMIT_ATTEMPTS_MAX);
        await assert.rejects(
          node.put('refused', 'x'),
          (err: unknown) => isKind(ErrorKind.Storage)(err) && /store is failing/.test((err as Error).message),
        );
        assert.equal((await node.get('kept'))?.toString(), 'before', 'reads go on');
        node.debug.failCommits(0, 0);
        await eventually(async () => (await failures()) === 0);
        await node.put('after', 'y');
        assert.equal((await node.get('after'))?.toString(), 'y');
        assert.equal((await node.get('waited'))?.toString(), 'x', 'the write that waited landed');
        assert.equal(await node.get('refused'), undefined, 'a refused write was never applied');
      } finally {
        await node.close();
        await dir.cleanup();
      }
    });
  }
});

describe('TTL cleaner', () => {
  for (const store of STORES) {
    test(`expired values become tombstones on ${store}`, async () => {
      await withNode(
        `clean-${store}`,
        { store, workers: 2, fragments: 4, cleanIntervalMs: 100 },
        async (node) => {
          await node.putMany(
            Array.from({ length: 50 }, (_, i) => [`exp-${i}`, 'v'] as const),
            { ttlMs: 50 },
          );
          await node.put('keep', 'v');
          await eventually(async () => {
            const h = await node.health();
            return h.fragments.reduce((n, f) => n + f.expiredSwept, 0) === 50;
          });
          assert.equal((await node.get('keep'))?.toString(), 'v');
          const page = await node.scan({ prefix: 'exp-' });
          assert.deepEqual(page.entries, []);
        },
      );
    });
  }

  // lmdb: the background pool reads the pages; memory: the worker itself.
  for (const store of ['lmdb', 'memory'] as const) {
    test(`the cleaner examines at most cleanKeysPerSec keys a second, then finishes, on ${store}`, async () => {
      const keys = 6000;
      const perSec = 3000;
      await withNode(
        `clean-rate-${store}`,
        { store, workers: 1, fragments: 1, cleanIntervalMs: 100, cleanKeysPerSec: perSec },
        async (node) => {
          await node.putMany(
            Array.from({ length: keys }, (_, i) => [`exp-${i}`, 'v'] as const),
            { ttlMs: 200 },
          );
          const swept = async () => (await node.health()).fragments.reduce((n, f) => n + f.expiredSwept, 0);
          await eventually(async () => (await swept()) > 0);
          const firstMs = Date.now();
          await eventually(async () => (await swept()) === keys, 20_000);
          const elapsedMs = Date.now() - firstMs;
          // Unpaced, a pass over 6000 keys takes a few tens of ms. Paced, the keys after the first
          // page wait their turn: at least one lmdb pool page (4096 keys) or 11 worker pages (512).
          assert.ok(elapsedMs >= 1000, `${keys} expired keys swept in ${elapsedMs} ms at ${perSec} keys/s`);
        },
      );
    });
  }
});

describe('reads after acknowledged writes', () => {
  for (const store of STORES) {
    test(`every read sees the last acknowledged write, at every durability, on ${store}`, async () => {
      // A short flush interval makes memory-durability writes commit between the reads, so reads
      // switch between the worker and (lmdb) the main thread's snapshot while the test runs.
      await withNode(
        `ryw-${store}`,
        { store, workers: 2, fragments: 4, flushIntervalMs: 2 },
        async (node) => {
          const levels = ['memory', 'store', 'stable'] as const;
          for (let i = 0; i < 600; i++) {
            const key = `ryw-${i % 7}`;
            const background = Array.from({ length: 20 }, (_, j) =>
              node.put(`noise-${i}-${j}`, 'x', { durability: 'memory' }),
            );
            await node.put(key, `v${i}`, { durability: levels[i % 3] });
            assert.equal((await node.get(key))?.toString(), `v${i}`, `read ${i} of ${key}`);
            if (i % 50 === 0) await sleep(5);
            await Promise.all(background);
          }
        },
      );
    });
  }
});
