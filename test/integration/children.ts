// What a test starts and may not stop: a test that times out never reaches its own cleanup, and a
// child process or a server it left running would keep the file's process — and so the whole test
// run — from ending. Under the test runner, what is left is released once every test of the file
// has run; children still running when the process exits are killed.

import type { ChildProcess } from 'node:child_process';
import { after } from 'node:test';

/** Releases still to run (a child's kill, a fixture's stop). */
const leftovers = new Set<() => Promise<void> | void>();
/** Children still running. */
const runningChildren = new Set<ChildProcess>();

// NODE_TEST_CONTEXT is set in the processes `node --test` runs files in; the crash tools that use
// this module also run as plain programs, which must not start a test harness. The hook is added
// once the file's own code has run, so that the file's `after` hooks (a stop it checks) run first.
if (process.env.NODE_TEST_CONTEXT !== undefined) setImmediate(() => after(releaseLeftovers));
process.once('exit', () => {
  for (const child of runningChildren) child.kill('SIGKILL');
});

/** Kills `child` with SIGKILL if it still runs once the file's tests have run, or when this process exits. */
export function killedAfterTests<T extends ChildProcess>(child: T): T {
  const kill = () => {
    child.kill('SIGKILL');
  };
  runningChildren.add(child);
  leftovers.add(kill);
  child.once('exit', () => {
    runningChildren.delete(child);
    leftovers.delete(kill);
  });
  return child;
}

/** Sends `signal` to `child` unless it has already exited (by itself or by a signal), and waits for its exit. */
export async function stopChild(child: ChildProcess, signal: NodeJS.Signals): Promise<void> {
  // A child that died of a signal (a crash) has no exit code, and its exit event has been emitted.
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill(signal);
  await exited;
}

/** Runs `release` once the file's tests have run, unless the returned function is called first. */
export function releasedAfterTests(release: () => Promise<void> | void): () => void {
  leftovers.add(release);
  return () => leftovers.delete(release);
}

async function releaseLeftovers(): Promise<void> {
  const releases = [...leftovers];
  leftovers.clear();
  await Promise.allSettled(releases.map(async (release) => release()));
}
