// A backup of a node's data directory while the node runs: the store's own consistent copy, then
// the manifest, into a directory that is new or empty, so a node started on the copy has the
// backed-up node's identity, fragments and data. Restoring is starting a node on it.

import fs from 'node:fs/promises';
import path from 'node:path';
import { invalidInput } from '../core/errors.js';
import { fsyncPath } from './fsync-path.js';
import type { KvStore } from './kv-store.js';
import { copyManifest } from './manifest.js';

export interface BackupReport {
  /** The backup's directory, absolute. */
  path: string;
  /** Bytes of the files written. */
  bytes: number;
  tookMs: number;
}

/** Copies `store` (a view of `dataDir`) and the manifest into `targetDir`, which must be new or empty. */
export async function backupDataDir(
  store: KvStore,
  dataDir: string,
  targetDir: string,
): Promise<BackupReport> {
  const startedMs = Date.now();
  const target = path.resolve(targetDir);
  const source = path.resolve(dataDir);
  if (target === source || target.startsWith(`${source}${path.sep}`)) {
    throw invalidInput(`a backup cannot go inside the data directory it copies (${source})`);
  }
  const existing = await fs.readdir(target).catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT') return undefined;
    throw invalidInput(`cannot use ${target} for a backup: ${err.message}`);
  });
  if (existing !== undefined && existing.length > 0) {
    throw invalidInput(`${target} is not empty: a backup goes into a new or empty directory`);
  }
  await fs.mkdir(target, { recursive: true });
  await store.backup(target);
  await copyManifest(source, target);
  await fsyncPath(path.dirname(target));
  return { path: target, bytes: await treeBytes(target), tookMs: Date.now() - startedMs };
}

async function treeBytes(dir: string): Promise<number> {
  let bytes = 0;
  for (const entry of await fs.readdir(dir, { withFileTypes: true, recursive: true })) {
    if (entry.isFile()) bytes += (await fs.stat(path.join(entry.parentPath, entry.name))).size;
  }
  return bytes;
}
