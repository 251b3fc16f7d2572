// The admin HTTP face over real TCP: health (and its 503 while the store fails), placement,
// Prometheus metrics that follow the Redis-protocol traffic, the status page, and refusals of what
// it does not serve.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import pino from 'pino';
import { COMMIT_ATTEMPTS_MAX } from '../../src/core/limits.js';
import { AdminServer } from '../../src/main/admin/server.js';
import { eventually } from './helpers.js';
import { type RespFixture, startResp } from './resp-helpers.js';

let fixture: RespFixture;
let admin: AdminServer;
let base: string;

before(async () => {
  fixture = await startResp({ label: 'admin', node: { store: 'lmdb', workers: 1, fragments: 16 } });
  admin = await AdminServer.listen(fixture.node, {
    port: 0,
    logger: pino({ level: 'silent' }),
    resp: fixture.server,
  });
  base = `http://127.0.0.1:${admin.address.port}`;
});

after(async () => {
  await admin?.close();
  await fixture?.stop();
});

/** One sample of the metrics page, by its exact name and labels. */
async function metric(series: string): Promise<number | undefined> {
  const text = await (await fetch(`${base}/metrics`)).text();
  for (const line of text.split('\n')) {
    if (line.startsWith(`${series} `)) return Number(line.slice(series.length + 1));
  }
  return undefined;
}

test('GET /health answers 200 with the health report; HEAD answers the same without a body', async () => {
  const res = await fetch(`${base}/health`);
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type') ?? '', /^application\/json/);
  const body = (await res.json()) as {
    state: string;
    healthy: boolean;
    peersDown: unknown[];
    nodeId: string;
    fragments: unknown[];
  };
  assert.equal(body.state, 'healthy');
  assert.equal(body.healthy, true);
  assert.deepEqual(body.peersDown, []);
  assert.equal(body.nodeId, fixture.node.nodeId);
  assert.equal(body.fragments.length, 16);
  const head = await fetch(`${base}/health`, { method: 'HEAD' });
  assert.equal(head.status, 200);
  assert.equal(await head.text(), '');
});

test('/health answers 503 while a fragment refuses writes, and 200 again once a commit succeeds', async () => {
  const r = await fixture.client();
  fixture.node.debug.failCommits(0, 1_000_000);
  // Acknowledged once in lmdb's write-ahead log; its commits fail, and the fragment then refuses.
  await r.set('admin:failing', 'x');
  await eventually(async () => (await fetch(`${base}/health`)).status === 503);
  const body = (await (await fetch(`${base}/health`)).json()) as { state: string; healthy: boolean };
  assert.equal(body.state, 'unhealthy');
  assert.equal(body.healthy, false);
  assert.equal(await metric('tessera_store_refusing_writes'), 1);
  assert.ok((await metric('tessera_store_commit_failures_in_a_row'))! >= COMMIT_ATTEMPTS_MAX);
  fixture.node.debug.failCommits(0, 0);
  await eventually(async () => (await fetch(`${base}/health`)).status === 200);
  assert.equal(await metric('tessera_store_refusing_writes'), 0);
});

test('/metrics counts the Redis-protocol traffic: commands, hits, misses, errors, bytes', async () => {
  const r = await fixture.client();
  const before = {
    commands: (await metric('tessera_commands_processed_total'))!,
    hits: (await metric('tessera_keyspace_hits_total'))!,
    misses: (await metric('tessera_keyspace_misses_total'))!,
    errors: (await metric('tessera_error_replies_total'))!,
    input: (await metric('tessera_net_input_bytes_total'))!,
  };
  await r.set('admin:k', 'v');
  await r.get('admin:k');
  await r.get('admin:none');
  await r.mget('admin:k', 'admin:none');
  await assert.rejects(r.incr('admin:k'));
  assert.equal((await metric('tessera_commands_processed_total'))! - before.commands, 5);
  assert.equal((await metric('tessera_keyspace_hits_total'))! - before.hits, 2);
  assert.equal((await metric('tessera_keyspace_misses_total'))! - before.misses, 2);
  assert.equal((await metric('tessera_error_replies_total'))! - before.errors, 1);
  assert.ok((await metric('tessera_net_input_bytes_total'))! > before.input);
  assert.ok((await metric('tessera_worker_writes_total{worker="0"}'))! >= 1);
  assert.ok((await metric('tessera_connected_clients'))! >= 1);
  assert.equal(await metric('tessera_worker_up{worker="0"}'), 1);
  const res = await fetch(`${base}/metrics`);
  assert.equal(res.headers.get('content-type'), 'text/plain; version=0.0.4; charset=utf-8');
});

test('/placement lists every fragment; the status page shows the node; /cluster is 404 without peers', async () => {
  const placement = (await (await fetch(`${base}/placement`)).json()) as Array<{
    fragment: number;
    slots: [number, number];
    serving: string;
  }>;
  assert.equal(placement.length, 16);
  assert.deepEqual(placement[0].slots, [0, 1023]);
  assert.deepEqual(placement[15].slots, [15360, 16383]);
  assert.ok(placement.every((f) => f.serving === fixture.node.nodeId));
  const page = await fetch(`${base}/`);
  assert.match(page.headers.get('content-type') ?? '', /^text\/html/);
  const html = await page.text();
  assert.ok(html.includes(`<h1>Tessera node ${fixture.node.nodeId}</h1>`));
  assert.match(html, /<td>0<\/td><td>ready<\/td>/);
  assert.equal((await fetch(`${base}/cluster`)).status, 404);
});

test('the status page counts reads where they are served, with rates, memory, disk and keys', async () => {
  const r = await fixture.client();
  await r.set('status:k', 'v');
  // Committed, so the main thread can answer GETs from its lmdb snapshot without a worker.
  await fixture.node.flush();
  const snapshotReads = (await fixture.node.health()).snapshotReads;
  const first = await (await fetch(`${base}/`)).text();
  for (let i = 0; i < 50; i++) assert.equal(await r.get('status:k'), 'v');
  assert.ok(
    (await fixture.node.health()).snapshotReads >= snapshotReads + 50,
    'the GETs were served from the snapshot',
  );
  assert.equal(await r.dbsize(), (await r.keys('*')).length);
  const second = await (await fetch(`${base}/`)).text();
  const shown = (html: string) =>
    Number(/Reads served on the main thread from its read snapshot: (\d+)/.exec(html)?.[1] ?? Number.NaN);
  assert.ok(
    shown(second) - shown(first) >= 50,
    `the page shows the snapshot reads: ${shown(first)} → ${shown(second)}`,
  );
  assert.match(second, /Reads served on the main thread from its read snapshot: \d+ \(\d+\/s\)/);
  assert.match(second, /<th>writes\/s<\/th>/);
  assert.match(second, /<td>\d+\/s<\/td>/, 'per-worker rates on the second page');
  assert.match(second, /<th>data directory on disk<\/th>/);
  assert.match(second, /<td>\d+\.\d MiB<\/td>/);
  assert.match(second, /<td>\d+ \(counted \d+ s ago\)<\/td>/, 'the key count DBSIZE made');
});

test('only GET and HEAD are served, and only the known pages', async () => {
  const post = await fetch(`${base}/health`, { method: 'POST', body: 'x' });
  assert.equal(post.status, 405);
  assert.equal(post.headers.get('allow'), 'GET, HEAD');
  assert.equal((await fetch(`${base}/nope`)).status, 404);
  assert.equal((await fetch(`${base}/metrics?x=1`)).status, 200, 'a query string does not change the page');
});
