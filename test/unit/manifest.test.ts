// The store identity manifest (DESIGN.md "Data model": F is bound into the store's identity at
// first start) and the fragment → worker → group assignment.
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, it } from 'node:test';
import { ErrorKind, TesseraError } from '../../src/core/errors.js';
import type { StoreKind } from '../../src/native-bindings/kv-store.js';
import {
  type BindOptions,
  bindStore,
  groupsOfWorker,
  MANIFEST_FILE,
  STORE_FORMAT_VERSION,
  upgradeManifest,
  workerOfFragment,
} from '../../src/native-bindings/manifest.js';

/** A TesseraError of `kind` whose message contains every one of `parts`. */
const errorWith =
  (kind: ErrorKind, ...parts: string[]) =>
  (err: unknown): boolean => {
    assert.ok(err instanceof TesseraError, `not a TesseraError: ${String(err)}`);
    assert.equal(err.kind, kind);
    for (const p of parts) assert.ok(err.message.includes(p), `message lacks "${p}": ${err.message}`);
    return true;
  };
/** A Storage error (the directory itself is unusable) whose message contains every one of `parts`. */
const storageErrorWith = (...parts: string[]) => errorWith(ErrorKind.Storage, ...parts);
/** A start refused for its options, which disagree with the data directory. */
const refusalWith = (...parts: string[]) => errorWith(ErrorKind.InvalidInput, ...parts);

describe('bindStore', () => {
  let dir: string;
  let dataDir: string;
  const opts = (over: Partial<BindOptions> = {}): BindOptions => ({
    kind: 'lmdb',
    dataDir,
    nodeId: undefined,
    fragmentCount: 16,
    workerCount: 3,
    ...over,
  });
  const manifestPath = () => path.join(dataDir, MANIFEST_FILE);
  const readManifest = async () =>
    JSON.parse(await fs.readFile(manifestPath(), 'utf8')) as Record<string, unknown>;

  beforeEach(async () => {
    dir = await fs.mkdtemp(path.join(os.tmpdir(), 'tessera-manifest-'));
    dataDir = path.join(dir, 'data'); // not yet there: bindStore creates it
  });
  afterEach(async () => {
    await fs.rm(dir, { recursive: true, force: true });
  });

  it('writes the manifest at first start, with a fresh node id when none is given', async () => {
    const bound = await bindStore(opts());
    assert.match(bound.nodeId, /^n-[0-9a-f]{12}$/);
    assert.equal(bound.groupCount, 3);
    assert.equal(bound.singleLmdbEnv, false);
    assert.deepEqual(await readManifest(), {
      format: STORE_FORMAT_VERSION,
      nodeId: bound.nodeId,
      fragmentCount: 16,
      store: 'lmdb',
      groupCount: 3,
    });
    // Only the manifest is left behind: the temp file was linked into place and removed.
    assert.deepEqual(await fs.readdir(dataDir), [MANIFEST_FILE]);
  });

  for (const kind of ['lmdb', 'level'] as const) {
    it(`binds the ${kind} group count at first start: min(workers, fragments)`, async () => {
      assert.equal((await bindStore(opts({ kind, workerCount: 3 }))).groupCount, 3);
      // A later start with more workers, or fewer, keeps the bound count.
      assert.equal((await bindStore(opts({ kind, workerCount: 8 }))).groupCount, 3);
      assert.equal((await bindStore(opts({ kind, workerCount: 1 }))).groupCount, 3);
      const other = path.join(dir, 'few-fragments');
      const few = await bindStore(opts({ kind, dataDir: other, fragmentCount: 2, workerCount: 8 }));
      assert.equal(few.groupCount, 2);
    });
  }

  it('rewrites a format 2 lmdb manifest as the current format, so that an older version refuses the logs; leaves a LevelDB one', async () => {
    const format2 = (store: StoreKind) =>
      `${JSON.stringify({ format: 2, nodeId: 'n-2', fragmentCount: 16, store, groupCount: 2 })}\n`;
    await fs.mkdir(dataDir, { recursive: true });
    await fs.writeFile(manifestPath(), format2('level'));
    assert.deepEqual(await bindStore(opts({ kind: 'level', workerCount: 2 })), {
      nodeId: 'n-2',
      groupCount: 2,
      singleLmdbEnv: false,
    });
    assert.equal((await readManifest()).format, 2, 'LevelDB did not change: read as it is');
    await fs.writeFile(manifestPath(), format2('lmdb'));
    assert.deepEqual(await bindStore(opts({ kind: 'lmdb', workerCount: 2 })), {
      nodeId: 'n-2',
      groupCount: 2,
      singleLmdbEnv: false,
      upgradedFrom: 2,
    });
    assert.deepEqual(await readManifest(), {
      format: STORE_FORMAT_VERSION,
      nodeId: 'n-2',
      fragmentCount: 16,
      store: 'lmdb',
      groupCount: 2,
    });
    assert.ok(STORE_FORMAT_VERSION > 2);
    // Once: the next bind reads the current format.
    assert.deepEqual(await bindStore(opts({ kind: 'lmdb', workerCount: 2 })), {
      nodeId: 'n-2',
      groupCount: 2,
      singleLmdbEnv: false,
    });
  });

  it('reads a format 1 manifest: LevelDB as it is, LMDB as one environment to migrate', async () => {
    const format1 = (store: StoreKind, levelGroupCount: number) =>
      `${JSON.stringify({ format: 1, nodeId: 'n-old', fragmentCount: 16, store, levelGroupCount })}\n`;
    await fs.mkdir(dataDir, { recursive: true });
    await fs.writeFile(manifestPath(), format1('level', 2));
    assert.deepEqual(await bindStore(opts({ kind: 'level', workerCount: 4 })), {
      nodeId: 'n-old',
      groupCount: 2,
      singleLmdbEnv: false,
    });
    await fs.writeFile(manifestPath(), format1('lmdb', 0));
    // The groups it will be migrated into: as a new store's, from this start's workers.
    assert.deepEqual(await bindStore(opts({ kind: 'lmdb', workerCount: 4 })), {
      nodeId: 'n-old',
      groupCount: 4,
      singleLmdbEnv: true,
    });
    await upgradeManifest(dataDir, 4);
    assert.deepEqual(await readManifest(), {
      format: STORE_FORMAT_VERSION,
      nodeId: 'n-old',
      fragmentCount: 16,
      store: 'lmdb',
      groupCount: 4,
    });
    assert.deepEqual(await bindStore(opts({ kind: 'lmdb', workerCount: 2 })), {
      nodeId: 'n-old',
      groupCount: 4,
      singleLmdbEnv: false,
    });
    assert.deepEqual(await fs.readdir(dataDir), [MANIFEST_FILE]);
  });

  it('keeps the given node id, and returns the stored one on a rebind without one', async () => {
    const first = await bindStore(opts({ nodeId: 'node-a' }));
    assert.equal(first.nodeId, 'node-a');
    assert.deepEqual(await bindStore(opts({ nodeId: 'node-a' })), first);
    assert.deepEqual(await bindStore(opts({ workerCount: 5 })), first);
  });

  it('refuses another fragment count, naming both and what to do', async () => {
    await bindStore(opts());
    await assert.rejects(
      bindStore(opts({ fragmentCount: 32 })),
      refusalWith(
        `data directory ${dataDir} was created with 16 fragments`,
        'this node was started with --fragments 32',
        'Start with --fragments 16',
        '--data-dir',
      ),
    );
  });

  it('says when the count it refuses was a default, not given', async () => {
    await bindStore(opts({ fragmentCount: 4 }));
    await assert.rejects(
      bindStore(opts({ fragmentCount: 16, defaulted: new Set(['fragments']) })),
      refusalWith(
        'this node was started without --fragments, whose default is 16',
        'Start with --fragments 4',
      ),
    );
  });

  it('refuses another store kind', async () => {
    await bindStore(opts({ kind: 'lmdb' }));
    await assert.rejects(
      bindStore(opts({ kind: 'level' })),
      refusalWith('lmdb store', 'started with --store level', '--store lmdb'),
    );
  });

  it('refuses another node id', async () => {
    await bindStore(opts({ nodeId: 'node-a' }));
    await assert.rejects(
      bindStore(opts({ nodeId: 'node-b' })),
      refusalWith('node id node-a', '--node-id node-b'),
    );
  });

  it('refuses another format version', async () => {
    await bindStore(opts());
    await fs.writeFile(
      manifestPath(),
      JSON.stringify({ ...(await readManifest()), format: STORE_FORMAT_VERSION + 1 }),
    );
    await assert.rejects(
      bindStore(opts()),
      storageErrorWith(`format ${STORE_FORMAT_VERSION + 1}`, `reads format ${STORE_FORMAT_VERSION}`),
    );
  });

  /** A well-formed format 2 manifest's text with the fields of `over` changed. */
  const manifestWith = (over: Record<string, unknown>): string =>
    JSON.stringify({ format: 2, nodeId: 'n', fragmentCount: 16, store: 'lmdb', groupCount: 1, ...over });
  const corrupt: Array<[string, string]> = [
    ['truncated JSON', '{"format": 2, "nodeId"'],
    ['not an object', '[1, 2]'],
    ['empty file', ''],
    ['a missing field', JSON.stringify({ format: 2, nodeId: 'n', store: 'lmdb', groupCount: 1 })],
    ['an unknown store', manifestWith({ store: 'rocks' })],
    ['a fractional count', manifestWith({ fragmentCount: 1.5 })],
    ['an empty node id', manifestWith({ nodeId: '' })],
    ['level without groups', manifestWith({ store: 'level', groupCount: 0 })],
    ['lmdb without groups', manifestWith({ groupCount: 0 })],
    ['format 1 lmdb with groups', manifestWith({ format: 1, groupCount: undefined, levelGroupCount: 2 })],
    ['format 1 level without levelGroupCount', manifestWith({ format: 1, store: 'level', groupCount: 2 })],
    ['more groups than fragments', manifestWith({ fragmentCount: 2, store: 'level', groupCount: 3 })],
  ];
  for (const [what, text] of corrupt) {
    it(`refuses a malformed manifest: ${what}`, async () => {
      await fs.mkdir(dataDir, { recursive: true });
      await fs.writeFile(manifestPath(), text);
      await assert.rejects(bindStore(opts()), storageErrorWith('malformed', MANIFEST_FILE, dataDir));
    });
  }

  it('refuses store data without a manifest', async () => {
    await fs.mkdir(path.join(dataDir, 'lmdb'), { recursive: true });
    await assert.rejects(bindStore(opts()), storageErrorWith('no MANIFEST.json', 'lmdb'));
  });

  it('binds nothing for the memory store', async () => {
    const bound = await bindStore(opts({ kind: 'memory', nodeId: 'mem-1' }));
    assert.deepEqual(bound, { nodeId: 'mem-1', groupCount: 0, singleLmdbEnv: false });
    assert.match((await bindStore(opts({ kind: 'memory' }))).nodeId, /^n-[0-9a-f]{12}$/);
    await assert.rejects(fs.stat(dataDir), { code: 'ENOENT' });
  });
});

describe('fragment and group assignment', () => {
  it('gives every fragment exactly one worker, and every group exactly one worker', () => {
    for (const fragmentCount of [1, 2, 7, 16, 100]) {
      for (const workerCount of [1, 2, 3, 8]) {
        const kinds: Array<[StoreKind, number]> = [
          ['memory', 0],
          ['level', Math.min(workerCount, fragmentCount)],
          ['level', Math.max(1, Math.min(fragmentCount, workerCount - 1))], // restarted with more workers
          ['level', Math.min(fragmentCount, workerCount + 2)], // restarted with fewer workers
        ];
        for (const [kind, groups] of kinds) {
          const owned = new Array<number>(fragmentCount).fill(0);
          for (let w = 0; w < workerCount; w++) {
            const myGroups = groupsOfWorker(w, groups, workerCount);
            for (let f = 0; f < fragmentCount; f++) {
              if (workerOfFragment(f, groups, workerCount) !== w) continue;
              owned[f]++;
              // A worker owns a fragment of a store with groups only if it opens the fragment's group.
              if (kind !== 'memory')
                assert.ok(myGroups.includes(f % groups), `${kind} F=${fragmentCount} W=${workerCount}`);
            }
          }
          assert.deepEqual(
            owned,
            new Array<number>(fragmentCount).fill(1),
            `${kind} F=${fragmentCount} W=${workerCount}`,
          );
          const groupOwners = new Array<number>(groups).fill(0);
          for (let w = 0; w < workerCount; w++)
            for (const g of groupsOfWorker(w, groups, workerCount)) groupOwners[g]++;
          assert.deepEqual(groupOwners, new Array<number>(groups).fill(1));
        }
      }
    }
  });

  it('spreads fragments round-robin without groups', () => {
    assert.deepEqual(
      [0, 1, 2, 3, 4, 5].map((f) => workerOfFragment(f, 0, 4)),
      [0, 1, 2, 3, 0, 1],
    );
    assert.deepEqual(groupsOfWorker(1, 5, 2), [1, 3]);
    assert.deepEqual(groupsOfWorker(1, 0, 2), []);
  });
});
