// fsync of a file or a directory by its path: a directory's fsync makes the names created in it
// survive power loss.

import fs from 'node:fs/promises';

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
