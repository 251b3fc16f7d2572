// One process per data directory: `<dataDir>/tessera.pid` names the process that holds it. Two
// nodes on one directory would each stamp writes the other then supersedes, and write one store
// from two processes.
//
// Node has no fcntl/flock, so this is a pid file, as PostgreSQL's postmaster.pid is: a start
// creates it (by link(2), which fails if it exists), and a close removes it. A file whose process
// is gone — it crashed, or the machine rebooted — is stale and taken over: the file records the
// holder's start time as the kernel counts it (/proc/<pid>/stat), so a pid since reused by another
// process is not mistaken for the holder. An unreadable file (a power loss can leave it empty) is
// stale too. Two starts racing over the same stale file could both take it; a start that is not
// racing a crashed holder's restart cannot.

import fs from 'node:fs/promises';
import path from 'node:path';
import { asStorageError, invalidInput } from '../core/errors.js';

export const DATA_DIR_LOCK_FILE = 'tessera.pid';
/** Stale files taken over before giving up: each takeover races at most one other start. */
const TAKEOVER_ATTEMPTS_MAX = 3;

interface Holder {
  pid: number;
  /** Field 22 of /proc/<pid>/stat (clock ticks after boot); undefined where there is no /proc. */
  startTicks: string | undefined;
}

export class DataDirLock {
  #released = false;

  private constructor(readonly file: string) {}

  /** Takes the directory (creating it) for this process, or refuses naming the holder's pid. */
  static async acquire(dataDir: string): Promise<DataDirLock> {
    const file = path.join(dataDir, DATA_DIR_LOCK_FILE);
    try {
      await fs.mkdir(dataDir, { recursive: true });
      const self: Holder = { pid: process.pid, startTicks: await startTicksOf(process.pid) };
      const temp = `${file}.${process.pid}.tmp`;
      await fs.writeFile(temp, JSON.stringify(self));
      try {
        for (let attempt = 0; attempt < TAKEOVER_ATTEMPTS_MAX; attempt++) {
          try {
            await fs.link(temp, file);
            return new DataDirLock(file);
          } catch (err) {
            if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
          }
          const holder = await readHolder(file);
          if (holder !== undefined && (await isRunning(holder))) {
            throw invalidInput(
              `data directory ${dataDir} is in use by process ${holder.pid} (${file}); ` +
                'one node per data directory',
            );
          }
          await fs.rm(file, { force: true });
        }
        throw invalidInput(`data directory ${dataDir}: could not take ${file} from a stale holder`);
      } finally {
        await fs.rm(temp, { force: true });
      }
    } catch (err) {
      throw asStorageError(err);
    }
  }

  /** Gives the directory up; idempotent. */
  async release(): Promise<void> {
    if (this.#released) return;
    this.#released = true;
    await fs.rm(this.file, { force: true });
  }
}

async function readHolder(file: string): Promise<Holder | undefined> {
  try {
    const holder = JSON.parse(await fs.readFile(file, 'utf8')) as Partial<Holder>;
    if (!Number.isInteger(holder.pid) || (holder.pid as number) <= 0) return undefined;
    return { pid: holder.pid as number, startTicks: holder.startTicks };
  } catch {
    return undefined;
  }
}

/** Whether the holder's process still runs: its pid is alive and, where known, started when it did. */
async function isRunning(holder: Holder): Promise<boolean> {
  try {
    process.kill(holder.pid, 0);
  } catch (err) {
    // EPERM: alive, another user's.
    if ((err as NodeJS.ErrnoException).code !== 'EPERM') return false;
  }
  if (holder.startTicks === undefined) return true;
  const now = await startTicksOf(holder.pid);
  return now === undefined || now === holder.startTicks;
}

/** The process's start time from /proc/<pid>/stat (after the command's parenthesised name). */
async function startTicksOf(pid: number): Promise<string | undefined> {
  try {
    const stat = await fs.readFile(`/proc/${pid}/stat`, 'utf8');
    // Fields after the name start with field 3 (state); the start time is field 22.
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[22 - 3];
  } catch {
    return undefined;
  }
}
