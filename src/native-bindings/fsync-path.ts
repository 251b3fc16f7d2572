// fsync of a file or a directory by its path: a directory's fsync makes the names created in it
// survive power loss.

import fs from 'node:fs/promises';
import path from 'node:path';

/** fsyncs `p`; with `missingOk`, a path removed meanwhile is not an error. */
export async function fsyncPath(p: string, missingOk = false): Promise<void> {
  let handle: fs.FileHandle;
  try {
    handle = await fs.open(p, 'r');
  } catch (err) {
    if (missingOk && (err as NodeJS.ErrnoException).code === 'ENOENT') return;
    throw err;
  }
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/** fsyncs every file in `dir`, then `dir` itself: a directory of new files is then on disk, names and all. */
export async function fsyncDirectoryFiles(dir: string): Promise<void> {
  for (const name of await fs.readdir(dir)) await fsyncPath(path.join(dir, name));
  await fsyncPath(dir);
}

/**
 * Puts the directory `fresh`, made aside, in place as `target` so that a power loss leaves either
 * no `target` or all of it: its files and itself synced first, then the rename and its parent.
 */
export async function renameIntoPlaceDurably(fresh: string, target: string): Promise<void> {
  await fsyncDirectoryFiles(fresh);
  await fs.rename(fresh, target);
  await fsyncPath(path.dirname(target));
}
