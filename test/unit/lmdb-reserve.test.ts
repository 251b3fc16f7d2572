// The disk blocks the lmdb store keeps allocated ahead of its data file's last page
// (src/native-bindings/lmdb-reserve.ts): what a fill writes and where, that a transaction within
// what is allocated writes nothing, and that a disk with no room is a storage error that says so.
// A whole node on a full file system is in test/fault/disk-full.test.ts.

import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { open } from 'lmdb';
import { ErrorKind, TesseraError } from '../../src/core/errors.js';
import {
  LmdbFileReserve,
  RESERVE_FILL_AHEAD_BYTES,
  RESERVE_PAGES_PER_OP,
  RESERVE_TXN_BASE_BYTES,
  reserveBytesFor,
} from '../../src/native-bindings/lmdb-reserve.js';

const PAGE = 4096;
/** A map far larger than any file here. */
const MAP = 1 << 30;

async function withFile(run: (file: string) => Promise<void>): Promise<void> {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'tessera-reserve-'));
  try {
    const file = path.join(dir, 'data.mdb');
    await fs.writeFile(file, Buffer.alloc(0));
    await run(file);
  } finally {
    await fs.rm(dir, { recursive: true, force: true });
  }
}

test('a transaction may take the base, its pages per operation and its records', () => {
  assert.equal(reserveBytesFor(0, 0, PAGE), RESERVE_TXN_BASE_BYTES);
  assert.equal(
    reserveBytesFor(10, 5000, PAGE),
    RESERVE_TXN_BASE_BYTES + 10 * RESERVE_PAGES_PER_OP * PAGE + 5000,
  );
});

test('a fill writes zeros from the next page to past the need, and only once for what it covers', async () => {
  await withFile(async (file) => {
    // LMDB's pages before the next one hold data: a fill must start at the next page, never before.
    const used = Buffer.alloc(8 * PAGE, 0xab);
    await fs.writeFile(file, used);
    const reserve = new LmdbFileReserve(file, PAGE);
    try {
      reserve.ensure(8, 100_000, MAP);
      const size = (await fs.stat(file)).size;
      assert.equal(size, 8 * PAGE + 100_000 + RESERVE_FILL_AHEAD_BYTES);
      const bytes = await fs.readFile(file);
      assert.deepEqual(bytes.subarray(0, 8 * PAGE), used, 'the used pages are untouched');
      assert.ok(bytes.subarray(8 * PAGE).every((b) => b === 0));

      // Within what is allocated: nothing is written (a marker past the next page stays).
      const handle = await fs.open(file, 'r+');
      await handle.write(Buffer.from([0x5a]), 0, 1, 20 * PAGE);
      await handle.close();
      reserve.ensure(10, RESERVE_FILL_AHEAD_BYTES, MAP);
      assert.equal((await fs.readFile(file))[20 * PAGE], 0x5a);
      assert.equal((await fs.stat(file)).size, size);

      // Past it: the fill starts where the last one ended, not at the next page again.
      reserve.ensure(10, RESERVE_FILL_AHEAD_BYTES + 200_000, MAP);
      assert.equal((await fs.readFile(file))[20 * PAGE], 0x5a);
      assert.equal(
        (await fs.stat(file)).size,
        10 * PAGE + RESERVE_FILL_AHEAD_BYTES + 200_000 + RESERVE_FILL_AHEAD_BYTES,
      );
    } finally {
      reserve.close();
    }
  });
});

test('blocks past the map are filled again after the file is cut to the map', async () => {
  await withFile(async (file) => {
    const reserve = new LmdbFileReserve(file, PAGE);
    try {
      reserve.ensure(0, 100_000, MAP);
      // LMDB maps the file again at the map's size, cutting what lay past it.
      const mapBytes = 64 * PAGE;
      await fs.truncate(file, mapBytes);
      // A need within what was filled before the cut, but past the map: filled again.
      reserve.ensure(0, 300_000, mapBytes);
      assert.equal((await fs.stat(file)).size, 300_000 + RESERVE_FILL_AHEAD_BYTES);
    } finally {
      reserve.close();
    }
  });
});

test('a fill that the disk has no room for is a storage error saying the disk is full', {
  skip: existsSync('/dev/full') ? false : 'needs /dev/full (Linux)',
}, () => {
  // Every write to /dev/full fails with ENOSPC.
  const reserve = new LmdbFileReserve('/dev/full', PAGE);
  try {
    assert.throws(
      () => reserve.ensure(0, 10_000, MAP),
      (err: unknown) =>
        err instanceof TesseraError &&
        err.kind === ErrorKind.Storage &&
        /disk full/.test(err.message) &&
        /ENOSPC/.test(err.message),
    );
  } finally {
    reserve.close();
  }
});

test('no LMDB transaction grows its file past the bound the reserve assumes', async () => {
  // Mixed transactions over 16 databases: 1 to 2 000 puts and removals of random keys, keys of 16
  // or 1 000 bytes, values of 100 bytes or of several pages.
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'tessera-reserve-bound-'));
  const root = open<Buffer, Buffer>({
    path: dir,
    noSync: true,
    useWritemap: true,
    maxDbs: 20,
    encoding: 'binary',
    keyEncoding: 'binary',
  });
  const env = (root as unknown as { env: { info(): { lastPageNumber: number } } }).env;
  try {
    const dbs = Array.from({ length: 16 }, (_, f) =>
      root.openDB<Buffer, Buffer>({ name: `f${f}`, encoding: 'binary', keyEncoding: 'binary' }),
    );
    let seed = 7;
    const random = (n: number) => {
      seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
      return seed % n;
    };
    let worst = 0;
    for (let t = 0; t < 400; t++) {
      const ops = 1 + random(t % 3 === 0 ? 2000 : 50);
      const keyBytes = t % 5 === 0 ? 1000 : 16;
      const valueBytes = t % 7 === 0 ? 5000 + random(20000) : 100;
      let recordBytes = 0;
      const writes: Array<[number, Buffer, Buffer | undefined]> = [];
      for (let i = 0; i < ops; i++) {
        const key = Buffer.alloc(keyBytes);
        key.writeUInt32BE(random(200_000), keyBytes - 4);
        const value = random(10) === 0 ? undefined : Buffer.alloc(valueBytes, 1);
        recordBytes += value?.length ?? 0;
        writes.push([random(16), key, value]);
      }
      const before = env.info().lastPageNumber;
      root.transactionSync(() => {
        for (const [f, key, value] of writes) {
          if (value === undefined) dbs[f].removeSync(key);
          else dbs[f].putSync(key, value);
        }
      });
      const grew = (env.info().lastPageNumber - before) * PAGE;
      // As the store counts them: every put and removal, and one high-water put per database.
      worst = Math.max(worst, grew / reserveBytesFor(ops + dbs.length, recordBytes, PAGE));
    }
    assert.ok(worst <= 1, `a transaction grew the file by ${worst.toFixed(2)}× its bound`);
    console.log(`largest growth: ${worst.toFixed(2)} of the bound`);
  } finally {
    await root.close();
    await fs.rm(dir, { recursive: true, force: true });
  }
});
