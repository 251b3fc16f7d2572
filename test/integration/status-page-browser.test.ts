// The status page as an operator's browser shows it: headless Chromium loads the admin page of a
// node whose peer is down, and the rendered page says the node is degraded, naming the peer, with
// the way to /cluster. Without Chromium on PATH the test is skipped, unless
// TESSERA_REQUIRE_CHROMIUM=1 (CI installs Debian's chromium and sets it).

import assert from 'node:assert/strict';
import { execFile, spawnSync } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { promisify } from 'node:util';
import pino from 'pino';
import { freePorts } from '../../bench/ports.js';
import { AdminServer } from '../../src/main/admin/server.js';
import { Tessera } from '../../src/main/node.js';
import { CLUSTER_SECRET } from './cluster-helpers.js';
import { eventually, tempDir } from './helpers.js';

const CHROMIUM = 'chromium';
const REQUIRE_CHROMIUM = process.env.TESSERA_REQUIRE_CHROMIUM === '1';
const haveChromium = spawnSync(CHROMIUM, ['--version'], { encoding: 'utf8' }).status === 0;

if (REQUIRE_CHROMIUM) {
  test('chromium is installed (TESSERA_REQUIRE_CHROMIUM=1)', () => {
    assert.ok(haveChromium, 'chromium is not on PATH: apt-get install chromium');
  });
}

/** The page's DOM after Chromium rendered it (the flags keep it off the network it cannot reach). */
async function renderedDom(url: string): Promise<string> {
  const profile = await mkdtemp(join(tmpdir(), 'tessera-chromium-'));
  try {
    const { stdout } = await promisify(execFile)(
      CHROMIUM,
      [
        '--headless',
        '--no-sandbox',
        '--disable-gpu',
        '--disable-quic',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
        `--user-data-dir=${profile}`,
        '--dump-dom',
        url,
      ],
      { encoding: 'utf8', timeout: 60_000, maxBuffer: 16 * 1024 * 1024 },
    );
    return stdout;
  } finally {
    await rm(profile, { recursive: true, force: true });
  }
}

test('the status page, rendered in Chromium, shows a node with a peer down as degraded', {
  skip: haveChromium ? false : 'chromium is not installed',
}, async () => {
  const dir = await tempDir('status-page-browser');
  const ports = await freePorts(2);
  // b is a member that never starts: a's peer is down from the first moment.
  const node = await Tessera.start({
    nodeId: 'a',
    peers: `a@127.0.0.1:${ports[0]},b@127.0.0.1:${ports[1]}`,
    clusterSecret: CLUSTER_SECRET,
    dataDir: `${dir.path}/a`,
    fragments: 8,
    workers: 1,
  });
  const admin = await AdminServer.listen(node, { port: 0, logger: pino({ level: 'silent' }) });
  try {
    await eventually(async () => (await node.health()).cluster?.peers[0].connected === false);
    const dom = await renderedDom(`http://127.0.0.1:${admin.address.port}/`);
    const degraded = /<p id="degraded" class="degraded">(.*?)<\/p>/s.exec(dom);
    assert.ok(degraded !== null, `no degraded line in the rendered page:\n${dom}`);
    assert.match(degraded[1], /<strong>Degraded<\/strong>/);
    assert.match(degraded[1], /\bb since /, 'it names the peer that is down');
    assert.match(degraded[1], /<a href="\/cluster">cluster<\/a>/, 'it links to /cluster');
  } finally {
    await admin.close();
    await node.close();
    await dir.cleanup();
  }
});
