// Child processes a test starts: none outlives the test process.

import type { ChildProcess } from 'node:child_process';

/** Children still running, killed when this test process exits (`killedAtExit`). */
const runningChildren = new Set<ChildProcess>();
let killsAtExit = false;

/**
 * Kills `child` with SIGKILL if it still runs when this process exits: a test that timed out never
 * reaches its own cleanup, and the runner (`--test-force-exit`) then ends the file without it.
 */
export function killedAtExit<T extends ChildProcess>(child: T): T {
  if (!killsAtExit) process.once('exit', killRunningChildren);
  killsAtExit = true;
  runningChildren.add(child);
  child.once('exit', () => runningChildren.delete(child));
  return child;
}

function killRunningChildren(): void {
  for (const child of runningChildren) child.kill('SIGKILL');
  runningChildren.clear();
}
