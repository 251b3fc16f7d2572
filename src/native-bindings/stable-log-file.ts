// Stable logs left by an older version of the lmdb store, replayed before the store opens.
//
// Until the store ran LMDB with overlapping sync (lmdb-store.ts), each worker made `stable` writes
// durable by appending them to `<dataDir>/lmdb/stable-<worker>.log` (opened O_DSYNC, in the format
// of src/core/stable-log.ts) instead of syncing the map, and synced the map at checkpoints. A data
// directory that such a version left after a crash or a power loss may hold acknowledged `stable`
// writes only in those logs, so a starting node still merges every log into the store before its
// workers open it (`replayStableLogs`), syncs the store and removes the logs. Records carry their
// LWW versions, so replaying what the store already holds changes nothing. Nothing writes these
// files any more.

import fs from 'node:fs';
import path from 'node:path';
import { storageError } from '../core/errors.js';
import { compareVersions, isWellFormedRecord, wallMsOf } from '../core/record.js';
import {
  readStableLog,
  STABLE_LOG_FRAME_HEADER_BYTES,
  type StableLogContents,
  StableLogCorrupt,
  type StableLogEntry,
} from '../core/stable-log.js';
import { fsyncPath } from './fsync-path.js';
import type { FragmentWrites, KvStore } from './kv-store.js';

const LOG_FILE_PATTERN = /^stable-(\d+)\.log$/;

/** True for the name of a stable log, holding anything or not. */
export const isStableLogName = (name: string): boolean => LOG_FILE_PATTERN.test(name);
/** Replayed entries per store commit: bounds one replay transaction. */
const REPLAY_COMMIT_ENTRIES_MAX = 4096;

/** False when the file's first bytes are absent or zero: no frame was ever written over them. */
async function holdsFrames(file: string): Promise<boolean> {
  const handle = await fs.promises.open(file, 'r');
  try {
    const head = Buffer.alloc(STABLE_LOG_FRAME_HEADER_BYTES);
    const { bytesRead } = await handle.read(head, 0, head.length, 0);
    return head.subarray(0, bytesRead).some((byte) => byte !== 0);
  } finally {
    await handle.close();
  }
}

export interface StableLogReplay {
  files: number;
  /** Entries read from whole frames. */
  entries: number;
  /** Entries newer than what the store held, now written to it. */
  applied: number;
  /** Bytes of torn frames at the ends of the files (writes never acknowledged). */
  tornBytes: number;
}

/**
 * The stable logs in an env directory that hold anything (absent directory: none). Every worker
 * creates its log when it opens the store, so an empty one — no bytes, or zeros where its first
 * frame would start — is the common case and needs no replay.
 */
export async function stableLogFiles(dir: string): Promise<string[]> {
  let names: string[];
  try {
    names = (await fs.promises.readdir(dir)).filter(isStableLogName).sort();
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw err;
  }
  const held = await Promise.all(names.map((name) => holdsFrames(path.join(dir, name))));
  return names.filter((_, i) => held[i]);
}

/**
 * Merges the stable logs `files` of `dir` into `store` (opened without a log of its own, every fragment
 * open), syncs the store, then removes the logs. A log whose checksummed contents are malformed
 * stops the start with a storage error naming it: it is kept for the operator.
 */
export async function replayStableLogs(
  dir: string,
  files: string[],
  store: KvStore,
  fragmentCount: number,
): Promise<StableLogReplay> {
  const report: StableLogReplay = { files: 0, entries: 0, applied: 0, tornBytes: 0 };
  for (const name of files) {
    const file = path.join(dir, name);
    const bytes = await fs.promises.readFile(file);
    let contents: StableLogContents;
    try {
      contents = readStableLog(bytes);
    } catch (err) {
      if (err instanceof StableLogCorrupt)
        throw storageError(`stable log ${file} is corrupt: ${err.message}`);
      throw err;
    }
    report.files++;
    report.entries += contents.entries.length;
    report.tornBytes += contents.tornBytes;
    report.applied += await mergeLogEntries(
      store,
      contents.entries,
      `stable log ${file}`,
      (f) => f < fragmentCount,
    );
  }
  if (files.length === 0) return report;
  await store.sync();
  for (const name of files) await fs.promises.rm(path.join(dir, name));
  await fsyncPath(dir);
  return report;
}

/**
 * Merges the entries of a log, in its order, into `store`: each entry newer than what the store
 * holds is committed (REPLAY_COMMIT_ENTRIES_MAX a transaction), and a drop marker empties its
 * fragment (the entries before it for that fragment are void). Opens each fragment it meets;
 * `accepts` says which the store holds — an entry for another is corruption. Returns the entries
 * applied.
 */
export async function mergeLogEntries(
  store: KvStore,
  entries: readonly StableLogEntry[],
  /** The log as errors name it: its kind and file. */
  log: string,
  accepts: (fragment: number) => boolean,
): Promise<number> {
  let applied = 0;
  let chunk: StableLogEntry[] = [];
  for (const entry of entries) {
    if (!accepts(entry.fragment))
      throw storageError(
        `${log} holds an entry for fragment ${entry.fragment}, which this store does not hold`,
      );
    await store.openFragment(entry.fragment);
    if (entry.drop) {
      applied += await mergeChunk(store, chunk, log);
      chunk = [];
      await store.dropFragment(entry.fragment);
      continue;
    }
    chunk.push(entry);
    if (chunk.length === REPLAY_COMMIT_ENTRIES_MAX) {
      applied += await mergeChunk(store, chunk, log);
      chunk = [];
    }
  }
  return applied + (await mergeChunk(store, chunk, log));
}

/** Commits the entries of `chunk` that are newer than the store's records; returns how many. */
async function mergeChunk(store: KvStore, chunk: readonly StableLogEntry[], log: string): Promise<number> {
  // Within a chunk a later entry for a key is compared with the earlier one staged, not the store.
  const staged = new Map<string, Uint8Array>();
  const writes = new Map<number, FragmentWrites>();
  let applied = 0;
  for (const { fragment, key, record } of chunk) {
    if (!isWellFormedRecord(record))
      throw storageError(`${log} holds a malformed record for fragment ${fragment}`);
    const id = `${fragment}:${key.toString('latin1')}`;
    const current = staged.get(id) ?? store.get(fragment, key);
    if (current !== undefined && compareVersions(record, current) <= 0) continue;
    staged.set(id, record);
    let w = writes.get(fragment);
    if (w === undefined) {
      w = { fragment, puts: [], deletes: [], highWaterWallMs: 0 };
      writes.set(fragment, w);
    }
    w.puts.push([key, record]);
    w.highWaterWallMs = Math.max(w.highWaterWallMs, wallMsOf(record));
    applied++;
  }
  if (writes.size > 0) await store.commit([...writes.values()]);
  return applied;
}
