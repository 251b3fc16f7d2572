// A node restarted while its wall clock reads earlier than the newest stamp it stored — its clock
// stepped back across the restart, or it had been stamping ahead of it, following a faster peer —
// must order its next writes after everything it stored. The process first runs 30 s ahead
// (libfaketime, Debian's faketime package) and takes a burst of SETs to one key in one socket read,
// so they share a millisecond and differ only in the logical counter; it is killed, started again
// on the real clock, and a SET to the same key must be applied: not refused as superseded, not
// taken for a write it already has.

import assert from 'node:assert/strict';
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { freePorts } from '../../bench/ports.js';
import { NodeProcess } from '../integration/cluster-helpers.js';
import { tempDir } from '../integration/helpers.js';

/** SETs of the burst: many stamps within one millisecond. */
const BURST = 200;
const INSTALL_HINT = 'apt-get install faketime';

/** libfaketime's library for threaded programs, wherever the machine's multiarch layout puts it. */
function faketimeLibrary(): string | undefined {
  const libDir = '/usr/lib';
  if (!existsSync(libDir)) return undefined;
  for (const entry of readdirSync(libDir)) {
    const candidate = join(libDir, entry, 'faketime', 'libfaketimeMT.so.1');
    if (existsSync(candidate)) return candidate;
  }
  return undefined;
}

const library = faketimeLibrary();
if (library === undefined && process.env.TESSERA_REQUIRE_FAKETIME === '1')
  throw new Error(`libfaketime is required: ${INSTALL_HINT}`);

test('a node restarted behind the newest millisecond it stored applies its next write (§2.3)', {
  skip: library === undefined ? `libfaketime is not installed (${INSTALL_HINT})` : false,
}, async () => {
  const dir = await tempDir('clock-step');
  const [port] = await freePorts(1);
  const node = new NodeProcess('n1', port, 0, dir.path, ['--store', 'lmdb', '--durability', 'store']);
  try {
    await node.start({ LD_PRELOAD: library!, FAKETIME: '+30s' });
    const ahead = await node.client();
    const burst = ahead.pipeline();
    for (let i = 0; i < BURST; i++) burst.set('k', `before-${i}`);
    const replies = await burst.exec();
    assert.ok(replies?.every(([error, reply]) => error === null && reply === 'OK'));
    assert.equal(await ahead.get('k'), `before-${BURST - 1}`);
    await node.stop('SIGKILL');

    await node.start();
    const behind = await node.client();
    assert.equal(await behind.set('k', 'after'), 'OK');
    assert.equal(await behind.get('k'), 'after');
  } finally {
    await node.stop('SIGKILL');
    await dir.cleanup();
  }
});
