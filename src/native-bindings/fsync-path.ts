// fsync of a file or a directory by its path: a directory's fsync makes the names created in it
// survive power loss.

import { randomBytes } from 'node:crypto';
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

/** Ends the name of a temp file written beside `file`: `<file>.<pid>.<random hex>.tmp`. */
export const TEMP_FILE_SUFFIX = '.tmp';

/** A fresh temp file name in `file`'s directory, unique to this process and call. */
export const tempPathBeside = (file: string): string =>
  `${file}.${process.pid}.${randomBytes(4).toString('hex')}${TEMP_FILE_SUFFIX}`;

/** Creates `file` (refused if it exists) holding `text`, fsynced; its name is durable once its directory is fsynced. */
export async function writeNewFileSynced(file: string, text: string): Promise<void> {
  const handle = await fs.open(file, 'wx');
  try {
    await handle.writeFile(text, 'utf8');
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/**
 * Replaces the file `target` with `text` so that a power loss leaves the old file or the new one,
 * never a torn one: a temp file beside it written and fsynced, renamed over it, the directory
 * fsynced. A crash before the rename leaves the temp file (tempPathBeside's name) for the caller
 * to remove at its next start.
 */
export async function replaceFileDurably(target: string, text: string): Promise<void> {
  const temp = tempPathBeside(target);
  try {
    await writeNewFileSynced(temp, text);
    await fs.rename(temp, target);
  } catch (err) {
    await fs.rm(temp, { force: true });
    throw err;
  }
  await fsyncPath(path.dirname(target));
}
