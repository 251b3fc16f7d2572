// One process per data directory (src/native-bindings/data-dir-lock.ts): a held directory is
// refused naming the holder; a file whose process is gone, whose pid now belongs to a process
// started at another time, or that a power loss left empty, is taken over.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import { DATA_DIR_LOCK_FILE, DataDirLock } from '../../src/native-bindings/data-dir-lock.js';

describe('data directory lock', () => {
  const dirs: string[] = [];
  after(async () => {
    for (const d of dirs) await fs.rm(d, { recursive: true, force: true });
  });
  async function freshDir(): Promise<string> {
    const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'tessera-lock-'));
    dirs.push(dir);
    return dir;
  }

  it('refuses a second holder naming the directory and the pid, until the first releases', async () => {
    const dir = await freshDir();
    const lock = await DataDirLock.acquire(dir);
    await assert.rejects(DataDirLock.acquire(dir), (err: Error) => {
      assert.match(err.message, new RegExp(`data directory ${dir} is in use by process ${process.pid}`));
      return true;
    });
    await lock.release();
    await lock.release();
    await (await DataDirLock.acquire(dir)).release();
    assert.deepEqual(await fs.readdir(dir), []);
  });

  it('takes over from a process that is gone', async () => {
    const dir = await freshDir();
    const gone = spawnSync(process.execPath, ['-e', '']).pid;
    assert.ok(gone !== undefined);
    await fs.writeFile(path.join(dir, DATA_DIR_LOCK_FILE), JSON.stringify({ pid: gone, startTicks: '1' }));
    await (await DataDirLock.acquire(dir)).release();
  });

  it('takes over from a pid reused by a process started at another time', async () => {
    const dir = await freshDir();
    const stale = { pid: process.pid, startTicks: 'not-this-start' };
    await fs.writeFile(path.join(dir, DATA_DIR_LOCK_FILE), JSON.stringify(stale));
    const lock = await DataDirLock.acquire(dir);
    const now = JSON.parse(await fs.readFile(path.join(dir, DATA_DIR_LOCK_FILE), 'utf8'));
    assert.equal(now.pid, process.pid);
    assert.notEqual(now.startTicks, stale.startTicks);
    await lock.release();
  });

  it('takes over from a file a power loss left empty or garbled', async () => {
    for (const content of ['', '{"pid":', 'not json']) {
      const dir = await freshDir();
      await fs.writeFile(path.join(dir, DATA_DIR_LOCK_FILE), content);
      await (await DataDirLock.acquire(dir)).release();
    }
  });
});
