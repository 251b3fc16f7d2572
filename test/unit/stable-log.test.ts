// The stable log (src/core/stable-log.ts, src/native-bindings/stable-log-file.ts): its frame format
// under torn and corrupted writes, and an lmdb store brought back after a simulated power loss — the
// map file reverted to its last checkpoint — holding every write a stable fence acknowledged.
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import {
  STABLE_LOG_FRAME_BYTES_MAX,
  STABLE_LOG_PREPARE_BYTES,
  STABLE_LOG_PREPARE_FIRST_BYTES,
} from '../../src/core/limits.js';
import { compareVersions, encodeRecord } from '../../src/core/record.js';
import {
  crc32,
  readStableLog,
  STABLE_LOG_FRAME_HEADER_BYTES,
  StableLogCorrupt,
  StableLogTail,
} from '../../src/core/stable-log.js';
import type { KvStore, StoreLocation } from '../../src/native-bindings/kv-store.js';
import { openStore, recoverStore } from '../../src/native-bindings/open-store.js';
import { stableLogFiles } from '../../src/native-bindings/stable-log-file.js';

const FRAGMENTS = 4;
const NODE = Buffer.from('n1');
const b = (text: string): Buffer => Buffer.from(text, 'latin1');
const rec = (wallMs: number, value: string): Buffer => encodeRecord(false, wallMs, 0, 0, NODE, b(value));

function frameOf(entries: Array<[number, string, Buffer]>): Buffer {
  const tail = new StableLogTail(16);
  for (const [f, k, r] of entries) assert.ok(tail.append(f, b(k), r));
  const frame = tail.seal();
  assert.ok(frame !== undefined);
  return frame;
}

describe('stable log format', () => {
  it('computes CRC-32 (IEEE) as zlib does', () => {
    assert.equal(crc32(b('123456789')), 0xcbf43926);
    assert.equal(crc32(b('')), 0);
  });

  it('reads back every entry of every frame, in order', () => {
    const one = frameOf([
      [0, 'a', rec(1, 'x')],
      [3, '', rec(2, 'empty key')],
    ]);
    const two = frameOf([[1, 'b'.repeat(1024), rec(3, 'y'.repeat(5000))]]);
    const log = readStableLog(Buffer.concat([one, two]));
    assert.equal(log.frames, 2);
    assert.equal(log.tornBytes, 0);
    assert.deepEqual(
      log.entries.map((e) => [e.fragment, e.key.toString('latin1'), e.record]),
      [
        [0, 'a', rec(1, 'x')],
        [3, '', rec(2, 'empty key')],
        [1, 'b'.repeat(1024), rec(3, 'y'.repeat(5000))],
      ],
    );
  });

  it('seals nothing when nothing was appended, and starts each frame empty', () => {
    const tail = new StableLogTail(16);
    assert.equal(tail.seal(), undefined);
    tail.append(0, b('a'), rec(1, 'x'));
    assert.ok(tail.seal());
    assert.equal(tail.entryCount, 0);
    assert.equal(tail.seal(), undefined);
  });

  it('ends the log at a frame torn anywhere, keeping the frames before it', () => {
    const first = frameOf([[0, 'a', rec(1, 'x')]]);
    const last = frameOf([
      [1, 'b', rec(2, 'y')],
      [2, 'c', rec(3, 'z')],
    ]);
    for (let cut = 0; cut < last.length; cut++) {
      const torn = last.subarray(0, cut);
      // Torn bytes are counted up to the last non-zero one: zeros may be the file's zero-fill.
      let nonZero = cut;
      while (nonZero > 0 && torn[nonZero - 1] === 0) nonZero--;
      for (const zeroFill of [0, 4096]) {
        const log = readStableLog(Buffer.concat([first, torn, Buffer.alloc(zeroFill)]));
        assert.equal(log.frames, 1, `cut at ${cut}, ${zeroFill} zero bytes after`);
        assert.equal(log.entries.length, 1);
        assert.equal(log.tornBytes, nonZero);
      }
    }
  });

  it('ends the log at a zero frame header: the zero-filled space after the frames', () => {
    const one = frameOf([[0, 'a', rec(1, 'x')]]);
    const two = frameOf([[1, 'b', rec(2, 'y')]]);
    const log = readStableLog(Buffer.concat([one, two, Buffer.alloc(64 * 1024)]));
    assert.equal(log.frames, 2);
    assert.equal(log.tornBytes, 0);
    assert.deepEqual(
      log.entries.map((e) => e.key.toString('latin1')),
      ['a', 'b'],
    );
    // A frame after zeros is not reached: frames are written one after another, never past a gap.
    const gap = readStableLog(Buffer.concat([one, Buffer.alloc(8), two]));
    assert.equal(gap.frames, 1);
    assert.equal(gap.tornBytes, 8 + two.length);
  });

  it('ends the log at a frame whose checksum fails', () => {
    const first = frameOf([[0, 'a', rec(1, 'x')]]);
    const second = frameOf([[1, 'b', rec(2, 'y')]]);
    const third = frameOf([[2, 'c', rec(3, 'z')]]);
    for (let at = 0; at < second.length; at++) {
      const bad = Buffer.from(second);
      bad[at] ^= 0x40;
      const log = readStableLog(Buffer.concat([first, bad, third]));
      assert.equal(log.frames, 1, `flip at ${at}`);
      assert.deepEqual(log.entries[0].record, rec(1, 'x'));
    }
  });

  it('throws on a checksummed frame whose entries do not add up', () => {
    const frame = frameOf([[0, 'a', rec(1, 'x')]]);
    frame.writeUInt32LE(
      frame.readUInt32LE(STABLE_LOG_FRAME_HEADER_BYTES + 4) + 1,
      STABLE_LOG_FRAME_HEADER_BYTES + 4,
    );
    frame.writeUInt32LE(crc32(frame, STABLE_LOG_FRAME_HEADER_BYTES), 4);
    assert.throws(() => readStableLog(frame), StableLogCorrupt);
  });

  it('refuses an entry that would take a frame past its limit', () => {
    const tail = new StableLogTail(16);
    const big = Buffer.alloc(STABLE_LOG_FRAME_BYTES_MAX / 2);
    assert.ok(tail.append(0, b('a'), big));
    assert.equal(tail.append(0, b('b'), big), false);
    assert.equal(tail.entryCount, 1);
  });
});

describe('stable log: an lmdb store after a power loss', () => {
  const dirs: string[] = [];
  after(async () => {
    for (const d of dirs) await fs.rm(d, { recursive: true, force: true });
  });

  /** A new data directory, removed after the suite. */
  async function freshDataDir(): Promise<string> {
    const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'tessera-stable-log-'));
    dirs.push(dataDir);
    return dataDir;
  }
  /** The store with every fragment open: as a worker opens it (its stable log 0), or as a reader. */
  async function openAll(dataDir: string, stableLog: number | undefined): Promise<KvStore> {
    const store = await openStore(location(dataDir, stableLog));
    for (let f = 0; f < FRAGMENTS; f++) await store.openFragment(f);
    return store;
  }
  const openLogged = (dataDir: string) => openAll(dataDir, 0);
  /** Runs `check` on a reader of the store (no log of its own), then closes it. */
  async function withReader(dataDir: string, check: (reader: KvStore) => void): Promise<void> {
    const reader = await openAll(dataDir, undefined);
    try {
      check(reader);
    } finally {
      await reader.close();
    }
  }
  const location = (dataDir: string, stableLog: number | undefined): StoreLocation => ({
    kind: 'lmdb',
    dataDir,
    fragmentCount: FRAGMENTS,
    levelGroups: [],
    levelGroupCount: 0,
    stableLog,
  });
  const put = (store: KvStore, fragment: number, entries: Array<[string, Buffer]>, wallMs: number) =>
    store.commit([
      { fragment, puts: entries.map(([k, r]) => [b(k), r]), deletes: [], highWaterWallMs: wallMs },
    ]);

  it('replays every write a stable fence acknowledged over the map of the last checkpoint', async () => {
    const dataDir = await freshDataDir();
    const mapFile = path.join(dataDir, 'lmdb', 'data.mdb');
    let store = await openLogged(dataDir);
    await put(
      store,
      0,
      [
        ['a', rec(100, 'a1')],
        ['b', rec(100, 'b1')],
      ],
      100,
    );
    await store.sync(); // the first fence after opening is a checkpoint: the map is synced
    await store.close();

    store = await openLogged(dataDir);
    await put(store, 0, [['c', rec(150, 'c0')]], 150);
    await store.sync(); // checkpoint again (a new holder of the log): covers c
    const afterCheckpoint = await fs.readFile(mapFile);
    await put(store, 0, [['a', rec(200, 'a2')]], 200);
    await put(store, 2, [['', rec(201, 'empty key')]], 201);
    await store.sync(); // logged: one frame
    await put(store, 1, [['d', rec(300, 'd1')]], 300);
    await put(store, 0, [['b', rec(300, 'b2')]], 300);
    await store.sync(); // logged: a second frame
    await put(store, 3, [['unsynced', rec(400, 'lost')]], 400); // committed, never fenced
    await store.close();

    // Power loss: the pages written back since the checkpoint never reached the disk.
    await fs.writeFile(mapFile, afterCheckpoint);
    const replay = await recoverStore(location(dataDir, undefined));
    assert.deepEqual(replay, { files: 1, entries: 4, applied: 4, tornBytes: 0 });
    assert.deepEqual(
      await fs.readdir(path.join(dataDir, 'lmdb')).then((n) => n.filter((x) => x.endsWith('.log'))),
      [],
    );

    await withReader(dataDir, (reader) => {
      assert.deepEqual(reader.get(0, b('a')), rec(200, 'a2'));
      assert.deepEqual(reader.get(0, b('b')), rec(300, 'b2'));
      assert.deepEqual(reader.get(0, b('c')), rec(150, 'c0'));
      assert.deepEqual(reader.get(1, b('d')), rec(300, 'd1'));
      assert.deepEqual(reader.get(2, b('')), rec(201, 'empty key'));
      assert.equal(reader.get(3, b('unsynced')), undefined);
      // The clock's floor moves with the replayed records.
      assert.equal(reader.highWaterWallMs(0), 300);
      assert.equal(reader.highWaterWallMs(2), 201);
    });
  });

  it('writes frames over space zero-filled ahead of them; an unwritten log needs no replay', async () => {
    const dataDir = await freshDataDir();
    const envDir = path.join(dataDir, 'lmdb');
    const logFile = path.join(envDir, 'stable-0.log');
    const store = await openLogged(dataDir);
    try {
      await store.sync(); // a checkpoint: the log starts over, its first bytes zero-filled
      assert.equal((await fs.stat(logFile)).size, STABLE_LOG_PREPARE_FIRST_BYTES);
      assert.deepEqual(await stableLogFiles(envDir), []);
      await put(store, 0, [['a', rec(100, 'a1')]], 100);
      await store.sync(); // one frame, written over the zeros
      assert.deepEqual(await stableLogFiles(envDir), ['stable-0.log']);
    } finally {
      await store.close(); // waits for the fill the frame started
    }
    const bytes = await fs.readFile(logFile);
    const contents = readStableLog(bytes);
    assert.equal(contents.frames, 1);
    assert.equal(contents.tornBytes, 0);
    assert.deepEqual(
      contents.entries.map((e) => [e.fragment, e.key.toString('latin1'), e.record]),
      [[0, 'a', rec(100, 'a1')]],
    );
    // The frame started a fill to STABLE_LOG_PREPARE_BYTES past it.
    const frameBytes = STABLE_LOG_FRAME_HEADER_BYTES + bytes.readUInt32LE(0);
    assert.equal(bytes.length, frameBytes + STABLE_LOG_PREPARE_BYTES);
  });

  it('zero-fills further ahead once the frames pass half of what was filled', async () => {
    const dataDir = await freshDataDir();
    const logFile = path.join(dataDir, 'lmdb', 'stable-0.log');
    const store = await openLogged(dataDir);
    const value = 'v'.repeat(256 * 1024);
    const frames = Math.ceil((STABLE_LOG_PREPARE_BYTES * 0.75) / value.length);
    try {
      await store.sync();
      for (let i = 0; i < frames; i++) {
        await put(store, 0, [[`k${i}`, rec(100 + i, value)]], 100 + i);
        await store.sync();
      }
    } finally {
      await store.close(); // waits for a fill in flight
    }
    const bytes = await fs.readFile(logFile);
    assert.ok(bytes.length > STABLE_LOG_PREPARE_BYTES, `${bytes.length} bytes`);
    const contents = readStableLog(bytes);
    assert.equal(contents.frames, frames);
    assert.equal(contents.tornBytes, 0);
    assert.ok(bytes.length - contents.entries.length * value.length >= STABLE_LOG_PREPARE_BYTES / 2);
  });

  it('never replaces a newer record with an older logged one', async () => {
    const dataDir = await freshDataDir();
    let store = await openLogged(dataDir);
    await store.sync();
    await put(
      store,
      0,
      [
        ['k', rec(100, 'old')],
        ['same', rec(100, 's')],
      ],
      100,
    );
    await store.sync(); // logged
    await store.close();
    // Without the log the store moved on (as it does when only the process died).
    store = await openAll(dataDir, undefined);
    await put(store, 0, [['k', rec(500, 'new')]], 500);
    await store.close();

    const replay = await recoverStore(location(dataDir, undefined));
    assert.deepEqual(replay, { files: 1, entries: 2, applied: 0, tornBytes: 0 });
    await withReader(dataDir, (reader) => {
      const k = reader.get(0, b('k'));
      assert.ok(k !== undefined && compareVersions(k, rec(500, 'new')) === 0);
      assert.deepEqual(reader.get(0, b('same')), rec(100, 's'));
    });
  });

  it('ignores a torn last frame and stops the start on a corrupt one', async () => {
    const dataDir = await freshDataDir();
    const store = await openLogged(dataDir);
    await store.sync();
    await store.close();
    const logFile = path.join(dataDir, 'lmdb', 'stable-0.log');
    const whole = frameOf([[0, 'kept', rec(10, 'v')]]);
    const torn = frameOf([[0, 'torn', rec(11, 'w')]]).subarray(0, 20);
    await fs.writeFile(logFile, Buffer.concat([whole, torn]));
    assert.deepEqual(await recoverStore(location(dataDir, undefined)), {
      files: 1,
      entries: 1,
      applied: 1,
      tornBytes: 20,
    });

    const corrupt = frameOf([[FRAGMENTS + 1, 'x', rec(12, 'v')]]);
    await fs.writeFile(logFile, corrupt);
    await assert.rejects(recoverStore(location(dataDir, undefined)), /stable log .*stable-0\.log/);
    // Kept for the operator.
    assert.deepEqual(await fs.readFile(logFile), corrupt);
  });
});
