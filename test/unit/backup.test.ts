// The backup orchestration (src/native-bindings/backup.ts) around a store's own copy: where a backup
// may go, and that a failed one leaves nothing that looks like a backup. The copy itself is in the
// KvStore contract tests; a whole node's backup and restore in the embedded API tests.
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { ErrorKind, TesseraError } from '../../src/core/errors.js';
import { backupDataDir } from '../../src/native-bindings/backup.js';
import { openStore } from '../../src/native-bindings/open-store.js';

const invalid = (err: unknown) => err instanceof TesseraError && err.kind === ErrorKind.InvalidInput;

test('a backup goes into a new or empty directory outside the data directory; a failed one is removed', async () => {
  const root = await fs.mkdtemp(path.join(os.tmpdir(), 'tessera-backup-'));
  // The memory store refuses to back up: the failure after the target was claimed.
  const store = await openStore({
    kind: 'memory',
    dataDir: '',
    fragmentCount: 1,
    groups: [],
    groupCount: 0,
  });
  const copy = (target: string) => store.backup(target);
  const dataDir = path.join(root, 'data');
  try {
    await fs.mkdir(dataDir);
    await assert.rejects(backupDataDir(copy, dataDir, path.join(dataDir, 'inside')), invalid);
    await assert.rejects(backupDataDir(copy, dataDir, dataDir), invalid);

    const full = path.join(root, 'full');
    await fs.mkdir(full);
    await fs.writeFile(path.join(full, 'keep'), 'x');
    await assert.rejects(backupDataDir(copy, dataDir, full), /not empty/);
    assert.deepEqual(await fs.readdir(full), ['keep']);

    const fresh = path.join(root, 'fresh');
    await assert.rejects(backupDataDir(copy, dataDir, fresh), invalid);
    await assert.rejects(fs.stat(fresh), { code: 'ENOENT' }, 'the directory it created is removed');

    const empty = path.join(root, 'empty');
    await fs.mkdir(empty);
    await assert.rejects(backupDataDir(copy, dataDir, empty), invalid);
    assert.deepEqual(await fs.readdir(empty), [], 'a directory that was there stays, empty');
  } finally {
    await store.close();
    await fs.rm(root, { recursive: true, force: true });
  }
});
