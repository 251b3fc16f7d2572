// The lmdb store's write-ahead log (src/native-bindings/write-ahead-log.ts): what its writer logs
// and never commits is in the store when the writer next opens it, a replay never replaces a newer
// record, a dropped fragment's logged writes stay dropped, a torn tail is ignored, segments are
// removed once their writes are committed and flushed, and readers keep no log.
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import { ErrorKind, TesseraError } from '../../src/core/errors.js';
import {
  WAL_SEGMENT_BYTES_DEFAULT,
  WAL_SEGMENT_BYTES_MAX,
  WAL_SEGMENT_BYTES_MIN,
} from '../../src/core/limits.js';
import { encodeRecord } from '../../src/core/record.js';
import { resolveConfig, type TesseraOptions } from '../../src/main/config.js';
import type { FragmentWrites, KvStore, StoreLocation } from '../../src/native-bindings/kv-store.js';
import { lmdbGroupDir } from '../../src/native-bindings/lmdb-store.js';
import { openStore, recoverStore } from '../../src/native-bindings/open-store.js';
import { WriteAheadLog } from '../../src/native-bindings/write-ahead-log.js';
import { eventually } from '../integration/helpers.js';

const FRAGMENTS = 4;
const GROUPS = 2;
const NODE = Buffer.from('n1');
const b = (text: string): Buffer => Buffer.from(text, 'latin1');
const rec = (wallMs: number, value: string | Buffer): Buffer =>
  encodeRecord(false, wallMs, 0, 0, NODE, typeof value === 'string' ? b(value) : value);
const writes = (fragment: number, puts: Array<[string, Buffer]>, generation?: number): FragmentWrites => ({
  fragment,
  puts: puts.map(([k, r]) => [b(k), r]),
  deletes: [],
  highWaterWallMs: 0,
  generation,
});

const dirs: string[] = [];
after(async () => {
  for (const dir of dirs) await fs.rm(dir, { recursive: true, force: true });
});

async function freshLocation(): Promise<StoreLocation> {
  const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'tessera-wal-'));
  dirs.push(dataDir);
  const location: StoreLocation = {
    kind: 'lmdb',
    dataDir,
    fragmentCount: FRAGMENTS,
    groups: [0, 1],
    groupCount: GROUPS,
  };
  await recoverStore(location);
  return location;
}

async function openWriter(location: StoreLocation): Promise<KvStore> {
  const store = await openStore({ ...location, writer: true });
  for (let f = 0; f < FRAGMENTS; f++) await store.openFragment(f);
  return store;
}

/** Segments of 1 MiB (`walSegmentBytes`): a few appends fill one. */
const SEGMENT_BYTES = 1024 * 1024;

/** A log in a fresh directory whose env flushes are counted: removing a segment starts with one. */
async function countedLog(): Promise<{ dir: string; log: WriteAheadLog; flushes: () => number }> {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'tessera-wal-'));
  dirs.push(dir);
  let flushes = 0;
  const log = await WriteAheadLog.create(
    dir,
    async () => {
      flushes++;
    },
    SEGMENT_BYTES,
  );
  return { dir, log, flushes: () => flushes };
}

/** Appends `fragment`'s writes at generations 1, 2, … until a second segment starts; returns the first's last. */
async function fillFirstSegment(log: WriteAheadLog, dir: string, fragment: number): Promise<number> {
  const value = Buffer.alloc(64 * 1024, 3);
  let generation = 0;
  while ((await fs.readdir(dir)).length < 2) {
    generation++;
    assert.equal(
      log.append([writes(fragment, [[`k${generation}`, rec(generation, value)]], generation)]),
      undefined,
    );
  }
  return generation;
}

const segments = async (location: StoreLocation, group: number): Promise<string[]> =>
  (await fs.readdir(lmdbGroupDir(location.dataDir, group))).filter((n) => n.startsWith('wal-')).sort();

describe('write-ahead log', () => {
  it('takes its segment size from walSegmentBytes, checked where the option enters', () => {
    assert.equal(resolveConfig({ store: 'lmdb' }).walSegmentBytes, WAL_SEGMENT_BYTES_DEFAULT);
    assert.equal(
      resolveConfig({ store: 'lmdb', walSegmentBytes: SEGMENT_BYTES }).walSegmentBytes,
      SEGMENT_BYTES,
    );
    const refused = (options: TesseraOptions, pattern: RegExp) =>
      assert.throws(
        () => resolveConfig(options),
        (err: unknown) =>
          err instanceof TesseraError && err.kind === ErrorKind.InvalidInput && pattern.test(err.message),
      );
    refused(
      { store: 'lmdb', walSegmentBytes: WAL_SEGMENT_BYTES_MIN - 1 },
      /walSegmentBytes must be an integer in/,
    );
    refused(
      { store: 'lmdb', walSegmentBytes: WAL_SEGMENT_BYTES_MAX + 1 },
      /walSegmentBytes must be an integer in/,
    );
    refused({ store: 'level', walSegmentBytes: SEGMENT_BYTES }, /the level store keeps none/);
    refused({ store: 'memory', walSegmentBytes: SEGMENT_BYTES }, /the memory store keeps none/);
  });

  it('brings back at the next opening what was logged and never committed', async () => {
    const location = await freshLocation();
    const store = await openWriter(location);
    assert.equal(store.logsWrites, true);
    const committed = [writes(0, [['a', rec(10, 'committed')]])];
    assert.equal(store.log(committed), undefined);
    await store.commit(committed);
    // Logged only: the worker died before the commit.
    assert.equal(
      store.log([writes(1, [['b', rec(11, 'logged')]]), writes(2, [['c', rec(12, 'x')]])]),
      undefined,
    );
    assert.equal(store.log([writes(1, [['b', rec(13, 'logged later')]])]), undefined);
    assert.equal(store.get(1, b('b')), undefined, 'logging alone does not write the store');
    await store.close();

    const reopened = await openWriter(location);
    // Both groups' segments; the committed entry is not newer than the store's, so not applied.
    assert.deepEqual(reopened.replayed, { segments: 2, entries: 4, applied: 3, tornBytes: 0 });
    assert.deepEqual(reopened.get(0, b('a')), rec(10, 'committed'));
    assert.deepEqual(reopened.get(1, b('b')), rec(13, 'logged later'));
    assert.deepEqual(reopened.get(2, b('c')), rec(12, 'x'));
    // Replayed, flushed and removed; a fresh segment is started in each group.
    assert.deepEqual(await segments(location, 0), ['wal-00000001.log']);
    assert.deepEqual(await segments(location, 1), ['wal-00000001.log']);
    assert.equal((await fs.stat(path.join(lmdbGroupDir(location.dataDir, 1), 'wal-00000001.log'))).size, 0);
    await reopened.close();
  });

  it('never replaces a newer record with an older logged one', async () => {
    const location = await freshLocation();
    const store = await openWriter(location);
    assert.equal(store.log([writes(0, [['k', rec(20, 'older')]])]), undefined);
    // A newer version reached the store without this log (anti-entropy's would pass through it too;
    // the order of the two is what matters).
    const newer = [writes(0, [['k', rec(30, 'newer')]])];
    assert.equal(store.log(newer), undefined);
    await store.commit(newer);
    await store.close();
    const reopened = await openWriter(location);
    assert.deepEqual(reopened.get(0, b('k')), rec(30, 'newer'));
    await reopened.close();
  });

  it("keeps a dropped fragment's logged writes dropped, and takes those after the drop", async () => {
    const location = await freshLocation();
    const store = await openWriter(location);
    assert.equal(store.log([writes(3, [['gone', rec(40, 'before the drop')]])]), undefined);
    await store.dropFragment(3);
    assert.equal(store.log([writes(3, [['back', rec(41, 'after the drop')]])]), undefined);
    await store.close();
    const reopened = await openWriter(location);
    assert.equal(reopened.get(3, b('gone')), undefined);
    assert.deepEqual(reopened.get(3, b('back')), rec(41, 'after the drop'));
    await reopened.close();
  });

  it('ignores a torn frame at the end of the log', async () => {
    const location = await freshLocation();
    const store = await openWriter(location);
    assert.equal(store.log([writes(0, [['whole', rec(50, 'kept')]])]), undefined);
    await store.close();
    const file = path.join(lmdbGroupDir(location.dataDir, 0), 'wal-00000001.log');
    // A frame header promising more than was written: a power loss mid-append.
    await fs.appendFile(file, Buffer.from([0x40, 0, 0, 0, 1, 2, 3, 4, 9, 9, 9]));
    const reopened = await openWriter(location);
    assert.equal(reopened.replayed?.tornBytes, 11);
    assert.deepEqual(reopened.get(0, b('whole')), rec(50, 'kept'));
    await reopened.close();
  });

  it('refuses to open on a checksummed frame whose entries do not add up, naming the file', async () => {
    const location = await freshLocation();
    const store = await openWriter(location);
    await store.close();
    const file = path.join(lmdbGroupDir(location.dataDir, 0), 'wal-00000001.log');
    const { crc32 } = await import('../../src/core/stable-log.js');
    const payload = Buffer.from([0, 0, 5, 0]); // a cut entry header
    const header = Buffer.alloc(8);
    header.writeUInt32LE(payload.length, 0);
    header.writeUInt32LE(crc32(payload), 4);
    await fs.writeFile(file, Buffer.concat([header, payload]));
    await assert.rejects(openWriter(location), /write-ahead log .*wal-00000001\.log is corrupt/);
  });

  it('removes a segment once its writes are committed and flushed', async () => {
    const location = { ...(await freshLocation()), walSegmentBytes: SEGMENT_BYTES };
    const store = await openWriter(location);
    const value = Buffer.alloc(64 * 1024, 7);
    const perSegment = Math.ceil(SEGMENT_BYTES / value.length) + 1;
    let logged: FragmentWrites[] = [];
    for (let i = 0; i < perSegment; i++) {
      const w = [writes(0, [[`big-${i}`, rec(100 + i, value)]], i + 1)];
      assert.equal(store.log(w), undefined);
      logged = logged.concat(w);
    }
    // Past the segment's size: the next one was started; the first waits for its commits.
    assert.deepEqual(await segments(location, 0), ['wal-00000001.log', 'wal-00000002.log']);
    // One commit per generation, as the actor makes them.
    for (const w of logged) await store.commit([w]);
    await store.sync();
    await eventually(async () => (await segments(location, 0)).length === 1, 30_000);
    assert.deepEqual(await segments(location, 0), ['wal-00000002.log']);
    await store.close();
    const reopened = await openWriter(location);
    assert.equal(reopened.get(0, b(`big-${perSegment - 1}`))?.length, rec(0, value).length);
    await reopened.close();
  });

  it('keeps a segment until a commit reaches the generation of its last append there', async () => {
    const { dir, log, flushes } = await countedLog();
    const generation = await fillFirstSegment(log, dir, 0);
    // Generation `generation` was the first segment's last. A commit one short of it (its write
    // logged while that commit was already on its way) must not let the segment go.
    log.committed([writes(0, [], generation - 1)]);
    assert.equal(flushes(), 0, 'the segment is kept');
    log.committed([writes(0, [], generation)]);
    assert.equal(flushes(), 1, 'the segment is being removed');
    await eventually(async () => (await fs.readdir(dir)).length === 1, 30_000);
    assert.deepEqual(await fs.readdir(dir), ['wal-00000002.log']);
    await log.close();
  });

  it("forgets what a dropped fragment's commits reached: its next actor counts from 1", async () => {
    const { dir, log, flushes } = await countedLog();
    log.committed([writes(1, [], 500)]);
    log.appendDrop(1);
    const generation = await fillFirstSegment(log, dir, 1);
    assert.equal(flushes(), 0, "the old actor's generation 500 covers nothing of the new one's");
    log.committed([writes(1, [], generation)]);
    assert.equal(flushes(), 1);
    await log.close();
  });

  it('keeps no log for a reader of the store', async () => {
    const location = await freshLocation();
    const reader = await openStore(location);
    assert.equal(reader.logsWrites, false);
    assert.match(reader.log([writes(0, [['x', rec(1, 'y')]])]) ?? '', /not opened as its groups' writer/);
    await reader.close();
    assert.deepEqual(await segments(location, 0), []);
  });
});
