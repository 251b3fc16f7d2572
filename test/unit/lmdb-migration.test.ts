// A format 1 data directory (one LMDB environment for the node) migrated at start into one
// environment per group (src/native-bindings/lmdb-store.ts, `recoverLmdbStore`): every entry and
// high-water mark kept, the old environment gone, and a migration a crash interrupted either made
// again (before the manifest was rewritten) or finished (after).
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import { encodeRecord } from '../../src/core/record.js';
import type { KvStore, StoreLocation } from '../../src/native-bindings/kv-store.js';
import { STORE_FORMAT_VERSION } from '../../src/native-bindings/manifest.js';
import { openStore, recoverStore } from '../../src/native-bindings/open-store.js';
import { type Format1Fragment, writeFormat1LmdbDir } from './fixtures/format1-lmdb.js';

const FRAGMENTS = 8;
const GROUPS = 3;
const NODE = Buffer.from('n1');
const rec = (wallMs: number, value: Uint8Array): Buffer => encodeRecord(false, wallMs, 0, 0, NODE, value);
const key = (f: number, i: number): Buffer => Buffer.from(`f${f}-k${String(i).padStart(5, '0')}`);

/**
 * What the old environment holds: fragment 0 more entries than one migration transaction copies,
 * the empty key and binary keys, a value large enough for overflow pages, an empty fragment (7)
 * with only a high-water mark, and one never opened (6).
 */
function contents(): Map<number, Format1Fragment> {
  const fragments = new Map<number, Format1Fragment>();
  for (let f = 0; f < FRAGMENTS; f++) {
    if (f === 6) continue;
    const count = f === 0 ? 9000 : f === 7 ? 0 : 50 + f;
    const entries: Array<[Buffer, Buffer]> = [];
    for (let i = 0; i < count; i++) entries.push([key(f, i), rec(1_000 + i, Buffer.from(`v${f}-${i}`))]);
    if (f === 1) {
      entries.push([Buffer.alloc(0), rec(5, Buffer.from('the empty key'))]);
      entries.push([Buffer.from([0x00, 0xff, 0x00]), rec(6, Buffer.from('binary'))]);
      entries.push([Buffer.from('large'), rec(7, Buffer.alloc(100_000, 7))]);
    }
    fragments.set(f, { entries, highWaterWallMs: 50_000 + f });
  }
  return fragments;
}

const location = (dataDir: string): StoreLocation => ({
  kind: 'lmdb',
  dataDir,
  fragmentCount: FRAGMENTS,
  groups: Array.from({ length: GROUPS }, (_, g) => g),
  groupCount: GROUPS,
});

async function pageAll(store: KvStore, fragment: number): Promise<Array<[Buffer, Buffer]>> {
  const out: Array<[Buffer, Buffer]> = [];
  let start: { key: Buffer; inclusive: boolean } | undefined;
  for (;;) {
    const page = await store.page(fragment, start, undefined, 1000);
    for (const e of page) out.push([e.key, e.record]);
    if (page.length < 1000) return out;
    start = { key: page[page.length - 1].key, inclusive: false };
  }
}

/** Opens the migrated store and checks it holds exactly `expected`, and nothing of the old layout is left. */
async function checkMigrated(dataDir: string, expected: Map<number, Format1Fragment>): Promise<void> {
  const lmdbDir = path.join(dataDir, 'lmdb');
  assert.deepEqual((await fs.readdir(lmdbDir)).sort(), ['group-0', 'group-1', 'group-2']);
  const manifest = JSON.parse(await fs.readFile(path.join(dataDir, 'MANIFEST.json'), 'utf8'));
  assert.equal(manifest.format, STORE_FORMAT_VERSION);
  assert.equal(manifest.groupCount, GROUPS);
  assert.equal(manifest.nodeId, 'n-format1', 'the node keeps its identity');
  const store = await openStore(location(dataDir));
  try {
    for (let f = 0; f < FRAGMENTS; f++) {
      await store.openFragment(f);
      const want = expected.get(f) ?? { entries: [], highWaterWallMs: 0 };
      const sorted = [...want.entries].sort(([a], [b]) => Buffer.compare(a, b));
      assert.deepEqual(await pageAll(store, f), sorted, `fragment ${f}'s entries`);
      assert.equal(store.highWaterWallMs(f), want.highWaterWallMs, `fragment ${f}'s high-water mark`);
    }
    // Each fragment lives in its group's environment: group g holds fragments f ≡ g (mod 3).
    for (let g = 0; g < GROUPS; g++) {
      const only = await openStore({ ...location(dataDir), groups: [g] });
      try {
        for (let f = g; f < FRAGMENTS; f += GROUPS) await only.openFragment(f);
        await assert.rejects(only.openFragment((g + 1) % GROUPS), /did not open its lmdb group/);
      } finally {
        await only.close();
      }
    }
  } finally {
    await store.close();
  }
}

describe('lmdb: a format 1 data directory migrated into groups', () => {
  const dirs: string[] = [];
  const newDir = async (): Promise<string> => {
    const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'tessera-lmdb-migration-'));
    dirs.push(dir);
    return dir;
  };
  after(async () => {
    for (const d of dirs) await fs.rm(d, { recursive: true, force: true });
  });

  it('keeps every entry and high-water mark, and removes the old environment', async () => {
    const dataDir = await newDir();
    const expected = contents();
    await writeFormat1LmdbDir(dataDir, FRAGMENTS, expected);
    const recovery = await recoverStore(location(dataDir), true);
    const entries = [...expected.values()].reduce(
      (n, f) => n + f.entries.length + (f.highWaterWallMs > 0 ? 1 : 0),
      0,
    );
    assert.equal(recovery?.migrated?.groups, GROUPS);
    assert.equal(recovery?.migrated?.entries, entries);
    await checkMigrated(dataDir, expected);
    // The next start finds nothing left to do.
    assert.deepEqual(await recoverStore(location(dataDir), false), {
      replay: { files: 0, entries: 0, applied: 0, tornBytes: 0 },
    });
  });

  it('makes a migration again when a crash left it before the manifest was rewritten', async () => {
    const dataDir = await newDir();
    const expected = contents();
    await writeFormat1LmdbDir(dataDir, FRAGMENTS, expected);
    // Half a migration: a group env begun, with something in it that the old store never held.
    const begun = path.join(dataDir, 'lmdb', 'migration', 'group-0');
    await fs.mkdir(begun, { recursive: true });
    await fs.writeFile(path.join(begun, 'data.mdb'), Buffer.alloc(4096, 1));
    const recovery = await recoverStore(location(dataDir), true);
    assert.equal(recovery?.migrated?.groups, GROUPS);
    await checkMigrated(dataDir, expected);
  });

  it('finishes a migration a crash interrupted after the manifest was rewritten', async () => {
    const dataDir = await newDir();
    const expected = contents();
    await writeFormat1LmdbDir(dataDir, FRAGMENTS, expected);
    const oldEnv = await fs.readFile(path.join(dataDir, 'lmdb', 'data.mdb'));
    await recoverStore(location(dataDir), true);
    // As the crash left it: the manifest rewritten, group 0 moved into place, groups 1 and 2 not
    // yet, the old env still there.
    const lmdbDir = path.join(dataDir, 'lmdb');
    await fs.mkdir(path.join(lmdbDir, 'migration'));
    for (const g of [1, 2])
      await fs.rename(path.join(lmdbDir, `group-${g}`), path.join(lmdbDir, 'migration', `group-${g}`));
    await fs.writeFile(path.join(lmdbDir, 'data.mdb'), oldEnv);
    const recovery = await recoverStore(location(dataDir), false);
    assert.deepEqual(recovery?.finishedMigration, { groups: 2 });
    await checkMigrated(dataDir, expected);
  });

  it('migrates an old directory whose environment was never written', async () => {
    const dataDir = await newDir();
    await writeFormat1LmdbDir(dataDir, FRAGMENTS, new Map());
    await fs.rm(path.join(dataDir, 'lmdb'), { recursive: true });
    const recovery = await recoverStore(location(dataDir), true);
    assert.equal(recovery?.migrated?.entries, 0);
    await checkMigrated(dataDir, new Map());
  });
});
