// After a commit that LMDB could not write (a data file that cannot grow, as on a full disk),
// the store's sync settles with the commit's error instead of waiting for ever: lmdb-js never
// settles the flush of a failed transaction, and a stable write waits for a sync.

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';
import { fileURLToPath } from 'node:url';

const dirs: string[] = [];
after(async () => {
  for (const dir of dirs) await fs.rm(dir, { recursive: true, force: true });
});

/** The data file's limit, in the shell's 1 KiB blocks: a few dozen 64 KiB commits fit. */
const FILE_SIZE_LIMIT_KIB = 4096;

test('a sync after a commit LMDB could not write settles with the commit error', async () => {
  const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'tessera-failed-commit-'));
  dirs.push(dataDir);
  const child = fileURLToPath(new URL('./lmdb-failed-commit-child.js', import.meta.url));
  // SIGXFSZ ignored, so a write past the limit fails with EFBIG instead of killing the process.
  const out = execFileSync(
    'bash',
    [
      '-c',
      `trap '' XFSZ; ulimit -f ${FILE_SIZE_LIMIT_KIB}; exec "$0" "$1" "$2"`,
      process.execPath,
      child,
      dataDir,
    ],
    { encoding: 'utf8', timeout: 60_000 },
  );
  const { committed, commitError, logError, sync } = JSON.parse(out.trim().split('\n').at(-1) as string) as {
    committed: number;
    commitError: string | undefined;
    logError: string | undefined;
    sync: string;
  };
  assert.ok(committed > 0, 'commits went through before the limit');
  assert.ok(commitError !== undefined, `a commit failed within the limit (${committed} committed)`);
  assert.ok(logError !== undefined, 'a write-ahead log append failed within the limit');
  assert.match(sync, /^rejected: /, `the sync settled (${sync}) after: ${commitError}`);
});
