// Restarts on the same data directory (spec §10.2 identity manifest) and worker supervision
// (DESIGN.md "Worker threads": a crashed worker is restarted and its fragments reopened).

import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import path from 'node:path';
import { describe, test } from 'node:test';
import pino from 'pino';
import { ErrorKind, TesseraError } from '../../src/core/errors.js';
import { Keyspace } from '../../src/core/keyspace.js';
import { encodeRecord } from '../../src/core/record.js';
import { Tessera } from '../../src/main/node.js';
import { type Format1Fragment, writeFormat1LmdbDir } from '../unit/fixtures/format1-lmdb.js';
import { DURABLE_STORES, eventually, tempDir } from './helpers.js';

test('a format 1 lmdb data directory is migrated at its first start, and its groups serve any number of workers', async () => {
  const dir = await tempDir('restart-format1');
  try {
    const fragments = 16;
    const keyspace = new Keyspace(fragments);
    const n = 600;
    const byFragment = new Map<number, Format1Fragment>();
    for (let i = 0; i < n; i++) {
      const key = Buffer.from(`key-${i}`);
      const f = keyspace.fragmentOf(key);
      let fragment = byFragment.get(f);
      if (fragment === undefined) byFragment.set(f, (fragment = { entries: [], highWaterWallMs: 0 }));
      const wallMs = 1_700_000_000_000 + i;
      fragment.entries.push([
        key,
        encodeRecord(false, wallMs, 0, 0, Buffer.from('n-old'), Buffer.from(`value-${i}`)),
      ]);
      fragment.highWaterWallMs = wallMs;
    }
    await writeFormat1LmdbDir(dir.path, fragments, byFragment, 'n-old');
    const lines: string[] = [];
    const logger = pino({ level: 'info' }, { write: (line: string) => lines.push(line) });
    const keys = Array.from({ length: n }, (_, i) => `key-${i}`);
    // Two workers at the migration (two groups), then one worker holding both, then three (one idle).
    for (const workers of [2, 1, 3]) {
      const node = await Tessera.start({ store: 'lmdb', dataDir: dir.path, workers, fragments, logger });
      try {
        assert.equal(node.nodeId, 'n-old');
        const values = await node.getMany(keys);
        values.forEach((r, i) => {
          assert.ok(r.ok);
          assert.equal(r.value?.toString(), `value-${i}`, `key-${i} with ${workers} workers`);
        });
        await node.put(`after-${workers}`, `w${workers}`, { durability: 'store' });
        for (const w of [2, 1, 3].slice(0, [2, 1, 3].indexOf(workers)))
          assert.equal((await node.get(`after-${w}`))?.toString(), `w${w}`);
      } finally {
        await node.close();
      }
    }
    const logged = lines.map((l) => JSON.parse(l));
    const migrated = logged.filter((l) => l.msg.startsWith('lmdb store migrated'));
    // The start with three workers was told that one of them has no group.
    const fewer = logged.filter((l) =>
      l.msg.startsWith('the data directory has fewer groups than --workers'),
    );
    assert.deepEqual(
      fewer.map((l) => [l.groups, l.workers]),
      [[2, 3]],
    );
    assert.equal(migrated.length, 1, 'one migration, at the first start');
    assert.equal(migrated[0].groups, 2);
    assert.equal(migrated[0].entries, n + byFragment.size);
    assert.deepEqual((await fs.readdir(path.join(dir.path, 'lmdb'))).sort(), ['group-0', 'group-1']);
  } finally {
    await dir.cleanup();
  }
});

for (const store of DURABLE_STORES) {
  describe(`restart on ${store}`, () => {
    test('every write acknowledged at store survives a restart, and the clock resumes after them', async () => {
      const dir = await tempDir(`restart-${store}`);
      try {
        const first = await Tessera.start({ store, dataDir: dir.path, workers: 2, fragments: 16 });
        const n = 2000;
        await Promise.all(
          Array.from({ length: n }, (_, i) => first.put(`key-${i}`, `value-${i}`, { durability: 'store' })),
        );
        await first.delete('key-5');
        await first.put('ttl-key', 'v', { ttlMs: 3_600_000 });
        const lastWrite = await first.getEntry('ttl-key');
        const nodeId = first.nodeId;
        await first.close();

        const second = await Tessera.start({ store, dataDir: dir.path, workers: 2, fragments: 16 });
        try {
          assert.equal(second.nodeId, nodeId, 'the node id is kept in the data directory');
          const values = await second.getMany(Array.from({ length: n }, (_, i) => `key-${i}`));
          values.forEach((r, i) => {
            assert.ok(r.ok);
            assert.equal(r.value?.toString(), i === 5 ? undefined : `value-${i}`, `key-${i}`);
          });
          const ttl = await second.ttl('ttl-key');
          assert.ok(ttl > 3_500_000, 'the deadline is absolute and survives');
          await second.put('after-restart', 'v');
          const entry = await second.getEntry('after-restart');
          assert.ok(entry && lastWrite);
          assert.ok(
            entry.wallMs > lastWrite.wallMs ||
              (entry.wallMs === lastWrite.wallMs && entry.logical > lastWrite.logical),
            'new writes order after everything stored',
          );
        } finally {
          await second.close();
        }
      } finally {
        await dir.cleanup();
      }
    });

    test('reopening with another fragment count, store or node id is refused with a clear message', async () => {
      const dir = await tempDir(`identity-${store}`);
      try {
        const node = await Tessera.start({
          store,
          dataDir: dir.path,
          workers: 2,
          fragments: 16,
          nodeId: 'node-a',
        });
        await node.put('k', 'v');
        await node.close();
        await assert.rejects(
          Tessera.start({ store, dataDir: dir.path, workers: 2, fragments: 32 }),
          (err: unknown) =>
            err instanceof TesseraError &&
            err.kind === ErrorKind.InvalidInput &&
            /16 fragments/.test(err.message) &&
            /32/.test(err.message),
        );
        const other = store === 'lmdb' ? 'level' : 'lmdb';
        await assert.rejects(Tessera.start({ store: other, dataDir: dir.path, fragments: 16 }), /store/);
        await assert.rejects(
          Tessera.start({ store, dataDir: dir.path, fragments: 16, nodeId: 'node-b' }),
          /node-a/,
        );
        const again = await Tessera.start({ store, dataDir: dir.path, workers: 2, fragments: 16 });
        assert.equal((await again.get('k'))?.toString(), 'v', 'the refused starts changed nothing');
        await again.close();
      } finally {
        await dir.cleanup();
      }
    });

    test('a crashed worker is restarted, its requests fail clearly, and the node keeps serving', async () => {
      const dir = await tempDir(`crash-${store}`);
      const node = await Tessera.start({ store, dataDir: dir.path, workers: 2, fragments: 16 });
      try {
        const keys = Array.from({ length: 200 }, (_, i) => `crash-${i}`);
        await Promise.all(keys.map((k) => node.put(k, 'before', { durability: 'store' })));
        const victim = node.debug.workerOf('crash-0');
        const inFlight = Array.from({ length: 300 }, (_, i) => node.put(`inflight-${i}`, 'v'));
        node.debug.crashWorker(victim);
        const settled = await Promise.allSettled(inFlight);
        for (const r of settled) {
          if (r.status === 'rejected') {
            assert.ok(
              r.reason instanceof TesseraError && r.reason.kind === ErrorKind.Internal,
              String(r.reason),
            );
            assert.match(r.reason.message, /stopped unexpectedly/);
          }
        }
        // The requests may all have been answered before the crash took the worker down: wait for
        // the restart itself.
        await eventually(async () => {
          const worker = (await node.health()).workers[victim];
          return worker.restarts >= 1 && worker.state === 'ready';
        });
        const values = await node.getMany(keys);
        assert.ok(
          values.every((r) => r.ok && r.value?.toString() === 'before'),
          'committed data is reopened',
        );
        await node.put('crash-0', 'after');
        assert.equal((await node.get('crash-0'))?.toString(), 'after');
      } finally {
        await node.close();
        await dir.cleanup();
      }
    });
  });
}
