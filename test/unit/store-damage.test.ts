// A store a power loss or a failing disk left unreadable. An lmdb data file (lmdb-store.ts) whose
// meta pages are zeros (lmdb-js would crash the process opening it) is refused with a message naming
// the file and what to do, unless it is zeros throughout — a file a power loss took before its first
// flush, which never held anything durable — when a starting node's recovery removes it and the
// store starts empty. A LevelDB group that cannot be opened (level-store.ts) is refused likewise.
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import { encodeRecord } from '../../src/core/record.js';
import type { StoreLocation } from '../../src/native-bindings/kv-store.js';
import { openStore, recoverStore } from '../../src/native-bindings/open-store.js';

const FRAGMENTS = 2;

describe('lmdb: a data file whose meta pages are zeros', () => {
  const dirs: string[] = [];
  after(async () => {
    for (const d of dirs) await fs.rm(d, { recursive: true, force: true });
  });
  /** A data directory whose lmdb data file holds `content`. */
  async function dataDirWith(content: Buffer): Promise<{ location: StoreLocation; dataFile: string }> {
    const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'tessera-lmdb-damage-'));
    dirs.push(dataDir);
    const dataFile = path.join(dataDir, 'lmdb', 'group-0', 'data.mdb');
    await fs.mkdir(path.dirname(dataFile), { recursive: true });
    await fs.writeFile(dataFile, content);
    const location = {
      kind: 'lmdb' as const,
      dataDir,
      fragmentCount: FRAGMENTS,
      groups: [0],
      groupCount: 1,
    };
    return { location, dataFile };
  }

  it('starts empty on a file of zeros throughout, which never held a flushed state', async () => {
    const { location } = await dataDirWith(Buffer.alloc(256 * 1024));
    // Opened before the node's recovery ran, it is refused: another thread may be creating it anew.
    await assert.rejects(openStore(location), /zeros throughout/);
    await recoverStore(location);
    const store = await openStore(location);
    try {
      await store.openFragment(0);
      assert.equal(store.get(0, Buffer.from('k')), undefined);
      const record = encodeRecord(false, 100, 0, 0, Buffer.from('n1'), Buffer.from('v'));
      await store.commit([
        { fragment: 0, puts: [[Buffer.from('k'), record]], deletes: [], highWaterWallMs: 100 },
      ]);
      assert.deepEqual(store.get(0, Buffer.from('k')), record);
    } finally {
      await store.close();
    }
  });

  it('refuses one that holds data past them, naming the file and what to do', async () => {
    const content = Buffer.alloc(64 * 1024);
    content.fill(0xab, 40 * 1024, 48 * 1024);
    const { location, dataFile } = await dataDirWith(content);
    await assert.rejects(recoverStore(location), /is damaged/);
    await assert.rejects(openStore(location), (err: Error) => {
      assert.match(err.message, /^storage error: the LMDB data file .* is damaged/);
      assert.ok(err.message.includes(dataFile), err.message);
      assert.match(err.message, /anti-entropy refills it/);
      return true;
    });
    // Kept for the operator.
    assert.deepEqual(await fs.readFile(dataFile), content);
  });
});

describe('level: a group LevelDB cannot open', () => {
  it('is refused with a message naming its directory, LevelDB’s reason and what to do', async () => {
    const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'tessera-level-damage-'));
    try {
      const location: StoreLocation = {
        kind: 'level',
        dataDir,
        fragmentCount: FRAGMENTS,
        groups: [0],
        groupCount: 1,
      };
      await (await openStore(location)).close();
      const groupDir = path.join(dataDir, 'level', 'group-0');
      // CURRENT names the MANIFEST LevelDB reads first; one it cannot find is a damaged database.
      await fs.writeFile(path.join(groupDir, 'CURRENT'), 'MANIFEST-999999\n');
      await assert.rejects(openStore(location), (err: Error) => {
        assert.ok(err.message.includes(groupDir), err.message);
        assert.match(err.message, /MANIFEST-999999/);
        assert.match(err.message, /anti-entropy refills it/);
        return true;
      });
    } finally {
      await fs.rm(dataDir, { recursive: true, force: true });
    }
  });
});
