// The stable log (src/core/stable-log.ts, src/native-bindings/stable-log-file.ts): its frame format
// under torn and corrupted writes, and the replay at start of the logs an older version of the lmdb
// store left, which may hold the only copy of acknowledged `stable` writes.
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import { STABLE_LOG_FRAME_BYTES_MAX } from '../../src/core/limits.js';
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
import { writeFormat1LmdbDir } from './fixtures/format1-lmdb.js';

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

  it('reads a drop marker back as one, between the entries around it', () => {
    const tail = new StableLogTail(16);
    assert.ok(tail.append(2, b('k'), rec(1, 'before')));
    assert.ok(tail.appendDrop(2));
    assert.ok(tail.append(2, b('k'), rec(2, 'after')));
    const frame = tail.frame();
    assert.ok(frame !== undefined);
    const log = readStableLog(Buffer.from(frame));
    assert.deepEqual(
      log.entries.map((e) => [e.fragment, e.drop, e.key.toString('latin1'), e.record.length]),
      [
        [2, false, 'k', rec(1, 'before').length],
        [2, true, '', 0],
        [2, false, 'k', rec(2, 'after').length],
      ],
    );
  });

  it('frames in place what seal copies', () => {
    const tail = new StableLogTail(16);
    assert.ok(tail.append(0, b('a'), rec(1, 'x')));
    const inPlace = Buffer.from(tail.frame()!);
    assert.deepEqual(tail.seal(), inPlace);
    assert.equal(tail.frame(), undefined, 'seal starts the next frame empty');
  });

  it('refuses an entry that would take a frame past its limit', () => {
    const tail = new StableLogTail(16);
    const big = Buffer.alloc(STABLE_LOG_FRAME_BYTES_MAX / 2);
    assert.ok(tail.append(0, b('a'), big));
    assert.equal(tail.append(0, b('b'), big), false);
    assert.equal(tail.entryCount, 1);
  });
});

describe('stable log: the logs an older lmdb store left, replayed at the next start', () => {
  const dirs: string[] = [];
  after(async () => {
    for (const d of dirs) await fs.rm(d, { recursive: true, force: true });
  });

  /**
   * A data directory of the format that wrote stable logs (format 1: one LMDB environment), whose
   * store holds `entries` in fragment 0.
   */
  async function storeHolding(entries: Array<[string, Buffer]>, wallMs: number): Promise<string> {
    const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'tessera-stable-log-'));
    dirs.push(dataDir);
    const fragment0 = {
      entries: entries.map(([k, r]): [Buffer, Buffer] => [b(k), r]),
      highWaterWallMs: wallMs,
    };
    await writeFormat1LmdbDir(dataDir, FRAGMENTS, new Map([[0, fragment0]]));
    return dataDir;
  }
  /** A start's recovery of a format 1 directory: the logs are replayed, then the store is migrated. */
  const replayed = async (dataDir: string) => (await recoverStore(location(dataDir), true))?.replay;
  async function openAll(dataDir: string): Promise<KvStore> {
    const store = await openStore(location(dataDir));
    for (let f = 0; f < FRAGMENTS; f++) await store.openFragment(f);
    return store;
  }
  /** Runs `check` on the store, then closes it. */
  async function withStore(dataDir: string, check: (store: KvStore) => void): Promise<void> {
    const store = await openAll(dataDir);
    try {
      check(store);
    } finally {
      await store.close();
    }
  }
  const location = (dataDir: string): StoreLocation => ({
    kind: 'lmdb',
    dataDir,
    fragmentCount: FRAGMENTS,
    groups: [0, 1],
    groupCount: 2,
  });
  const logFile = (dataDir: string, worker: number) => path.join(dataDir, 'lmdb', `stable-${worker}.log`);

  it('merges every logged write newer than the store, then removes the logs', async () => {
    const dataDir = await storeHolding(
      [
        ['a', rec(100, 'a1')],
        ['b', rec(100, 'b1')],
        ['c', rec(150, 'c0')],
      ],
      150,
    );
    // Two workers' logs, as they stood when the old version lost power; the second zero-filled ahead.
    await fs.writeFile(
      logFile(dataDir, 0),
      Buffer.concat([
        frameOf([
          [0, 'a', rec(200, 'a2')],
          [2, '', rec(201, 'empty key')],
        ]),
        frameOf([[0, 'b', rec(300, 'b2')]]),
      ]),
    );
    await fs.writeFile(
      logFile(dataDir, 1),
      Buffer.concat([frameOf([[1, 'd', rec(300, 'd1')]]), Buffer.alloc(64 * 1024)]),
    );
    // A worker that never logged leaves an empty file: nothing to replay.
    await fs.writeFile(logFile(dataDir, 2), Buffer.alloc(4096));
    assert.deepEqual(await stableLogFiles(path.join(dataDir, 'lmdb')), ['stable-0.log', 'stable-1.log']);

    assert.deepEqual(await replayed(dataDir), { files: 2, entries: 4, applied: 4, tornBytes: 0 });
    // The migration that follows leaves the groups alone: the old env and every log are gone.
    assert.deepEqual((await fs.readdir(path.join(dataDir, 'lmdb'))).sort(), ['group-0', 'group-1']);
    await withStore(dataDir, (store) => {
      assert.deepEqual(store.get(0, b('a')), rec(200, 'a2'));
      assert.deepEqual(store.get(0, b('b')), rec(300, 'b2'));
      assert.deepEqual(store.get(0, b('c')), rec(150, 'c0'));
      assert.deepEqual(store.get(1, b('d')), rec(300, 'd1'));
      assert.deepEqual(store.get(2, b('')), rec(201, 'empty key'));
      // The clock's floor moves with the replayed records.
      assert.equal(store.highWaterWallMs(0), 300);
      assert.equal(store.highWaterWallMs(2), 201);
    });
  });

  it('never replaces a newer record with an older logged one', async () => {
    const dataDir = await storeHolding(
      [
        ['k', rec(500, 'new')],
        ['same', rec(100, 's')],
      ],
      500,
    );
    await fs.writeFile(
      logFile(dataDir, 0),
      frameOf([
        [0, 'k', rec(100, 'old')],
        [0, 'same', rec(100, 's')],
      ]),
    );
    assert.deepEqual(await replayed(dataDir), { files: 1, entries: 2, applied: 0, tornBytes: 0 });
    await withStore(dataDir, (store) => {
      const k = store.get(0, b('k'));
      assert.ok(k !== undefined && compareVersions(k, rec(500, 'new')) === 0);
      assert.deepEqual(store.get(0, b('same')), rec(100, 's'));
    });
  });

  it('ignores a torn last frame and stops the start on a corrupt one', async () => {
    const dataDir = await storeHolding([], 0);
    const whole = frameOf([[0, 'kept', rec(10, 'v')]]);
    const torn = frameOf([[0, 'torn', rec(11, 'w')]]).subarray(0, 20);
    await fs.writeFile(logFile(dataDir, 0), Buffer.concat([whole, torn]));
    assert.deepEqual(await replayed(dataDir), {
      files: 1,
      entries: 1,
      applied: 1,
      tornBytes: 20,
    });

    const corruptDir = await storeHolding([], 0);
    const corrupt = frameOf([[FRAGMENTS + 1, 'x', rec(12, 'v')]]);
    await fs.writeFile(logFile(corruptDir, 0), corrupt);
    await assert.rejects(replayed(corruptDir), /stable log .*stable-0\.log/);
    // Kept for the operator, with the old env: nothing was migrated.
    assert.deepEqual(await fs.readFile(logFile(corruptDir, 0)), corrupt);
    await fs.access(path.join(corruptDir, 'lmdb', 'data.mdb'));
    assert.equal(JSON.parse(await fs.readFile(path.join(corruptDir, 'MANIFEST.json'), 'utf8')).format, 1);
  });
});
