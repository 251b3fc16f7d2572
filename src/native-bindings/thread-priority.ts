// A thread's CPU scheduling priority. On Linux setpriority(2) with a thread's id sets that thread's
// nice value alone (the kernel schedules threads, not processes), and /proc/thread-self names the
// calling thread's id; elsewhere this does nothing.

import { readlinkSync } from 'node:fs';
import { setPriority } from 'node:os';
import { basename } from 'node:path';

/**
 * Sets the calling thread's nice value (raising it needs no privilege). Returns why it could not,
 * or undefined once it did.
 */
export function setThreadNice(nice: number): string | undefined {
  let tid: number;
  try {
    tid = Number(basename(readlinkSync('/proc/thread-self')));
  } catch {
    return 'no /proc/thread-self (not Linux)';
  }
  if (!Number.isSafeInteger(tid) || tid <= 0) return 'no thread id in /proc/thread-self';
  try {
    setPriority(tid, nice);
    return undefined;
  } catch (err) {
    return (err as Error).message;
  }
}
