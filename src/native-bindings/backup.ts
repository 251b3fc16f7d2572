// A backup of a node's data directory while the node runs: the store's own consistent copy, then
// the manifest, into a directory that is new or empty, so a node started on the copy has the
// backed-up node's identity, fragments and data. Restoring is starting a node on it.

import fs from 'node:fs/promises';
import path from 'node:path';
import { invalidInput } from '../core/errors.js';
import { fsyncPath } from './fsync-path.js';
import { copyManifest } from './manifest.js';

export interface BackupReport {
  /** The backup's directory, absolute. */
  path: string;
  /** Bytes of the files written. */
  bytes: number;
  tookMs: number;
}

/**
 * Copies the store (`copyStore` writes its files into the target, as `KvStore.backup`) and the
 * manifest of `dataDir` into `targetDir`, which must be new or empty.
 */
export async function backupDataDir(
  copyStore: (targetDataDir: string) => Promise<void>,
  dataDir: string,
  targetDir: string,
): Promise<BackupReport> {
  const startedMs = Date.now();
  const target = path.resolve(targetDir);
  const source = path.resolve(dataDir);
  if (target === source || target.startsWith(`${source}${path.sep}`)) {
    throw invalidInput(`a backup cannot go inside the data directory it copies (${source})`);
  }
  await fs.mkdir(path.dirname(target), { recursive: true });
  // Creating the directory claims it: of two backups into one new directory, one fails here.
  const created = await fs.mkdir(target).then(
    () => true,
    (err: NodeJS.ErrnoException) => {
      if (err.code === 'EEXIST') return false;
      throw invalidInput(`cannot use ${target} for a backup: ${err.message}`);
    },
  );
  if (!created) {
    const existing = await fs.readdir(target).catch((err: NodeJS.ErrnoException) => {
      throw invalidInput(`cannot use ${target} for a backup: ${err.message}`);
    });
    if (existing.length > 0) {
      throw invalidInput(`${target} is not empty: a backup goes into a new or empty directory`);
    }
  }
  try {
    await copyStore(target);
    await copyManifest(source, target);
    await fsyncPath(path.dirname(target));
  } catch (err) {
    // A partial backup must not look like one: remove what this call wrote.
    if (created) await fs.rm(target, { recursive: true, force: true });
    else
      for (const name of await fs.readdir(target))
        await fs.rm(path.join(target, name), { recursive: true, force: true });
    throw err;
  }
  return { path: target, bytes: await treeBytes(target), tookMs: Date.now() - startedMs };
}

async function treeBytes(dir: string): Promise<number> {
  let bytes = 0;
  for (const entry of await fs.readdir(dir, { withFileTypes: true, recursive: true })) {
    if (entry.isFile()) bytes += (await fs.stat(path.join(entry.parentPath, entry.name))).size;
  }
  return bytes;
}
