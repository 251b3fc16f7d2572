// The store identity manifest, `<dataDir>/MANIFEST.json`: what a data directory was created with
// (format, node id, fragment count, store kind, group count). The main thread binds it before any
// worker opens a store, so a node restarted with other settings is refused with a message saying
// what differs, instead of reading its data under the wrong layout.
//
// Formats: 1 kept LevelDB's group count as `levelGroupCount` and one LMDB environment for the whole
// node; 2 keeps `groupCount` for both stores on disk, LMDB with one environment per group; 3 adds
// LMDB's write-ahead logs beside each environment, which a version that does not know them would
// leave unreplayed (losing acknowledged writes after a crash), so it must refuse the directory. A
// format 1 or 2 LevelDB directory is read as it is (its layout did not change); a format 2 LMDB
// directory is rewritten as format 3 at bind (it holds no log yet); a format 1 LMDB directory is
// migrated at start (lmdb-store.ts, `recoverLmdbStore`), which rewrites the manifest.
//
// Also here: which worker owns which fragment and group, since that follows from the bound group
// count.

import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { assert } from '../core/assert.js';
import { asStorageError, invalidInput, storageError, type TesseraError } from '../core/errors.js';
import {
  FRAGMENT_COUNT_MAX,
  MANIFEST_BYTES_MAX,
  NODE_ID_BYTES_MAX,
  WORKER_COUNT_MAX,
} from '../core/limits.js';
import { fsyncPath, replaceFileDurably, tempPathBeside, writeNewFileSynced } from './fsync-path.js';
import { STORE_KINDS, type StoreKind } from './kv-store.js';

/** Bumped whenever the stored layout (key forms, meta keys, directory layout) changes incompatibly. */
export const STORE_FORMAT_VERSION = 3;
/** The format before LMDB's write-ahead logs: one LMDB environment per group, nothing beside it. */
export const STORE_FORMAT_UNLOGGED_LMDB = 2;
/** The format whose LMDB store is one environment for the node (and whose manifest says `levelGroupCount`). */
export const STORE_FORMAT_SINGLE_LMDB_ENV = 1;
export const MANIFEST_FILE = 'MANIFEST.json';
/** A fresh node id is `n-` and this many random bytes in hex: 48 bits, unique among any real cluster's nodes. */
const NODE_ID_RANDOM_BYTES = 6;
/** Entries whose presence without a manifest means data of unknown identity. */
const STORE_DIRS = ['lmdb', 'level'];

export interface Manifest {
  format: number;
  nodeId: string;
  fragmentCount: number;
  store: StoreKind;
  /**
   * Fragment f lives in group f mod groupCount: a LevelDB database, or an LMDB environment, of its
   * own. Bound at first start (the workers then, at most the fragments); 0 for a format 1 LMDB
   * directory, whose one environment holds every fragment.
   */
  groupCount: number;
}

export interface BindOptions {
  kind: StoreKind;
  dataDir: string;
  /** The operator's `--node-id`, or undefined to use the stored one (or a fresh one at first start). */
  nodeId: string | undefined;
  fragmentCount: number;
  workerCount: number;
  /** The options the node took from their defaults, not from the operator: a refusal says so. */
  defaulted?: ReadonlySet<'store' | 'fragments'>;
}

export interface Binding {
  nodeId: string;
  groupCount: number;
  /**
   * The directory holds a format 1 LMDB store (one environment for the node): the start migrates it
   * into `groupCount` environments before any worker opens it (`recoverLmdbStore`).
   */
  singleLmdbEnv: boolean;
  /** The manifest of a format 2 LMDB directory was rewritten as the current format by this bind. */
  upgradedFrom?: number;
}

export async function bindStore(opts: BindOptions): Promise<Binding> {
  assert(
    Number.isInteger(opts.fragmentCount) &&
      opts.fragmentCount >= 1 &&
      opts.fragmentCount <= FRAGMENT_COUNT_MAX,
    'fragment count out of range',
  );
  assert(
    Number.isInteger(opts.workerCount) && opts.workerCount >= 1 && opts.workerCount <= WORKER_COUNT_MAX,
    'worker count out of range',
  );
  if (opts.kind === 'memory')
    return { nodeId: opts.nodeId ?? freshNodeId(), groupCount: 0, singleLmdbEnv: false };
  try {
    await fs.mkdir(opts.dataDir, { recursive: true });
    const existing = await readManifest(opts.dataDir);
    const manifest = existing ?? (await createManifest(opts));
    checkManifest(manifest, opts);
    if (manifest.store === 'lmdb' && manifest.groupCount === 0) {
      return { nodeId: manifest.nodeId, groupCount: groupCountFor(opts), singleLmdbEnv: true };
    }
    const binding: Binding = {
      nodeId: manifest.nodeId,
      groupCount: manifest.groupCount,
      singleLmdbEnv: false,
    };
    if (manifest.store === 'lmdb' && manifest.format === STORE_FORMAT_UNLOGGED_LMDB) {
      // Before any worker writes a log beside its environment: from here on an older version refuses it.
      const upgraded: Manifest = { ...manifest, format: STORE_FORMAT_VERSION };
      await replaceFileDurably(path.join(opts.dataDir, MANIFEST_FILE), manifestText(upgraded));
      binding.upgradedFrom = manifest.format;
    }
    return binding;
  } catch (err) {
    throw asStorageError(err);
  }
}

/** The group count a new store is bound to: one group per worker, at most one per fragment. */
const groupCountFor = (opts: BindOptions): number => Math.min(opts.workerCount, opts.fragmentCount);

export const freshNodeId = (): string => `n-${randomBytes(NODE_ID_RANDOM_BYTES).toString('hex')}`;

/** Which worker owns a fragment: the owner of its group, or without groups (memory) simply f mod workers. */
export function workerOfFragment(fragment: number, groupCount: number, workerCount: number): number {
  assert(Number.isInteger(fragment) && fragment >= 0, 'fragment id out of range');
  assert(Number.isInteger(workerCount) && workerCount >= 1, 'worker count out of range');
  const unit = groupCount > 0 ? fragment % groupCount : fragment;
  return unit % workerCount;
}

/** The groups a worker opens: g with g mod workers = worker (none when groupCount is 0). */
export function groupsOfWorker(worker: number, groupCount: number, workerCount: number): number[] {
  assert(Number.isInteger(worker) && worker >= 0 && worker < workerCount, 'worker index out of range');
  const groups: number[] = [];
  for (let g = worker; g < groupCount; g += workerCount) groups.push(g);
  return groups;
}

async function readManifest(dataDir: string): Promise<Manifest | undefined> {
  const file = path.join(dataDir, MANIFEST_FILE);
  let text: string;
  try {
    const stat = await fs.stat(file);
    if (stat.size > MANIFEST_BYTES_MAX)
      throw malformed(dataDir, `${stat.size} bytes, larger than any manifest`);
    text = await fs.readFile(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
  return parseManifest(dataDir, text);
}

/** Reads a manifest's text; every field is checked, since a hand-edited file may say anything. */
export function parseManifest(dataDir: string, text: string): Manifest {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    throw malformed(dataDir, `not JSON: ${(err as Error).message}`);
  }
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw))
    throw malformed(dataDir, 'not a JSON object');
  const m = raw as Record<string, unknown>;
  if (!Number.isInteger(m.format) || (m.format as number) < 1) throw malformed(dataDir, 'bad "format"');
  // A newer format is refused with what to do, whatever its other fields say.
  if ((m.format as number) > STORE_FORMAT_VERSION) {
    throw storageError(
      `data directory ${dataDir} was written in store format ${m.format}; this version of Tessera reads format ` +
        `${STORE_FORMAT_VERSION} and earlier. Start a Tessera release that reads format ${m.format}, or use a new --data-dir`,
    );
  }
  if (typeof m.nodeId !== 'string' || !isValidNodeId(m.nodeId)) throw malformed(dataDir, 'bad "nodeId"');
  const fragments = m.fragmentCount;
  if (
    !Number.isInteger(fragments) ||
    (fragments as number) < 1 ||
    (fragments as number) > FRAGMENT_COUNT_MAX
  ) {
    throw malformed(dataDir, 'bad "fragmentCount"');
  }
  if (typeof m.store !== 'string' || !STORE_KINDS.includes(m.store as StoreKind))
    throw malformed(dataDir, 'bad "store"');
  const single = m.format === STORE_FORMAT_SINGLE_LMDB_ENV;
  const groupsField = single ? 'levelGroupCount' : 'groupCount';
  const groups = m[groupsField];
  if (!Number.isInteger(groups) || (groups as number) < 0 || (groups as number) > (fragments as number)) {
    throw malformed(dataDir, `bad "${groupsField}"`);
  }
  // Format 1: LevelDB alone had groups. Format 2: both stores on disk have them.
  const grouped = single ? m.store === 'level' : m.store !== 'memory';
  if (grouped !== (groups as number) > 0) throw malformed(dataDir, `"${groupsField}" does not fit "store"`);
  return {
    format: m.format as number,
    nodeId: m.nodeId,
    fragmentCount: fragments as number,
    store: m.store as StoreKind,
    groupCount: groups as number,
  };
}

function isValidNodeId(id: string): boolean {
  const bytes = Buffer.byteLength(id, 'utf8');
  return bytes >= 1 && bytes <= NODE_ID_BYTES_MAX;
}

/** Refuses a manifest that disagrees with how the node was started; the message says what to do. */
function checkManifest(m: Manifest, opts: BindOptions): void {
  const dir = opts.dataDir;
  // The options disagree with the data directory: a start refused for its input.
  const startedWith = (flag: 'store' | 'fragments', value: string | number): string =>
    opts.defaulted?.has(flag) === true
      ? `this node was started without --${flag}, whose default is ${value}`
      : `this node was started with --${flag} ${value}`;
  if (m.store !== opts.kind) {
    throw invalidInput(
      `data directory ${dir} holds a ${m.store} store; ${startedWith('store', opts.kind)}. ` +
        `Start with --store ${m.store}, or use a new --data-dir`,
    );
  }
  if (m.fragmentCount !== opts.fragmentCount) {
    throw invalidInput(
      `data directory ${dir} was created with ${m.fragmentCount} fragments; ${startedWith('fragments', opts.fragmentCount)}. ` +
        `Start with --fragments ${m.fragmentCount}, or use a new --data-dir`,
    );
  }
  if (opts.nodeId !== undefined && m.nodeId !== opts.nodeId) {
    throw invalidInput(
      `data directory ${dir} belongs to node id ${m.nodeId}; this node was started with --node-id ` +
        `${opts.nodeId}. Start with --node-id ${m.nodeId} (or without --node-id), or use a new --data-dir`,
    );
  }
}

async function createManifest(opts: BindOptions): Promise<Manifest> {
  await refuseUnmanifestedData(opts.dataDir);
  const manifest: Manifest = {
    format: STORE_FORMAT_VERSION,
    nodeId: opts.nodeId ?? freshNodeId(),
    fragmentCount: opts.fragmentCount,
    store: opts.kind,
    groupCount: groupCountFor(opts),
  };
  const created = await writeOnce(opts.dataDir, manifestText(manifest));
  // Lost a race with another process binding the same directory: its manifest is the one.
  return created ? manifest : ((await readManifest(opts.dataDir)) ?? manifest);
}

/** Store files without a manifest were written under an unknown identity; reading them could misplace data. */
async function refuseUnmanifestedData(dataDir: string): Promise<void> {
  const entries = await fs.readdir(dataDir);
  const found = STORE_DIRS.filter((d) => entries.includes(d));
  if (found.length > 0) {
    throw storageError(
      `data directory ${dataDir} holds store data (${found.join(', ')}) but no ${MANIFEST_FILE}, so its fragment ` +
        'count and node id are unknown. Restore the manifest from a backup, or use a new --data-dir',
    );
  }
}

/** A manifest's text in the current format (the format 1 field name is only ever read). */
const manifestText = (manifest: Manifest): string => `${JSON.stringify(manifest, null, 2)}\n`;

/**
 * Rewrites a format 1 LMDB directory's manifest as format 2 with `groupCount` groups: the moment a
 * migration of its store takes effect (`recoverLmdbStore`). Atomic and durable: a power loss leaves
 * the old manifest or the new one.
 */
export async function upgradeManifest(dataDir: string, groupCount: number): Promise<void> {
  const manifest = await readManifest(dataDir);
  assert(
    manifest !== undefined && manifest.store === 'lmdb' && manifest.groupCount === 0,
    'only a format 1 lmdb manifest is upgraded',
  );
  assert(
    Number.isInteger(groupCount) && groupCount >= 1 && groupCount <= manifest.fragmentCount,
    'group count out of range',
  );
  const upgraded: Manifest = { ...manifest, format: STORE_FORMAT_VERSION, groupCount };
  await replaceFileDurably(path.join(dataDir, MANIFEST_FILE), manifestText(upgraded));
}

/** The format of the manifest in `dataDir` (undefined without one). */
export async function manifestFormat(dataDir: string): Promise<number | undefined> {
  return (await readManifest(dataDir))?.format;
}

/**
 * Writes the manifest atomically and only if absent: a temp file is written and fsynced, then
 * hard-linked into place (fails if a manifest appeared meanwhile), then the directory is fsynced so
 * the new name survives power loss. Returns false when another manifest won.
 */
async function writeOnce(dataDir: string, text: string): Promise<boolean> {
  const file = path.join(dataDir, MANIFEST_FILE);
  const temp = tempPathBeside(file);
  await writeNewFileSynced(temp, text);
  let created = true;
  try {
    await fs.link(temp, file);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    created = false;
  } finally {
    await fs.rm(temp, { force: true });
  }
  await fsyncPath(dataDir);
  return created;
}

/**
 * Copies the manifest of `dataDir` into `targetDir` (a backup of the data directory), written as
 * a new manifest is: atomically, fsynced, refused if the target already has one.
 */
export async function copyManifest(dataDir: string, targetDir: string): Promise<void> {
  const manifest = await readManifest(dataDir);
  if (manifest === undefined) throw invalidInput(`data directory ${dataDir} has no ${MANIFEST_FILE}`);
  if (!(await writeOnce(targetDir, manifestText(manifest)))) {
    throw invalidInput(`${targetDir} already holds a ${MANIFEST_FILE}`);
  }
}

const malformed = (dataDir: string, why: string): TesseraError =>
  storageError(
    `data directory ${dataDir} has a malformed ${MANIFEST_FILE} (${why}). Restore it from a backup, or use a new --data-dir`,
  );
