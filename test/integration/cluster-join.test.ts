// A cluster that grows while running, on real processes on 127.0.0.1: a node started with
// --peer-port alone is a one-member cluster; two more join through it with --join while a client
// writes, and every member sees the three Up and serves every acknowledged key; a joined node
// restarted without --join rejoins from its data directory. Cluster changes on the admin port need
// the token; a removed member that comes back is refused and serves nothing. A joiner no member
// answered cannot leave (it knows no member to tell): it is told to stop instead.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { JoiningNodes, type NodeProcess } from './cluster-helpers.js';
import { eventually } from './helpers.js';

const MAIN = fileURLToPath(new URL('../../src/main.js', import.meta.url));
const TOKEN = 'an-admin-token-for-the-join-tests';
/** Deadline of every condition waited for: a loaded 2-core machine is slow, not wrong. */
const CONDITION_MS_MAX = 30_000;

interface MembersBody {
  members: Array<{ nodeId: string; state: string; unreachable: boolean; incarnation: number }>;
}

async function membersAt(node: NodeProcess): Promise<MembersBody['members']> {
  const response = await fetch(`http://127.0.0.1:${node.adminPort}/cluster/members`);
  return ((await response.json()) as MembersBody).members;
}

async function allUp(node: NodeProcess, ids: string[]): Promise<boolean> {
  const members = await membersAt(node);
  return ids.every((id) => members.some((m) => m.nodeId === id && m.state === 'Up' && !m.unreachable));
}

async function change(node: NodeProcess, path: string, body: unknown, token?: string) {
  const response = await fetch(`http://127.0.0.1:${node.adminPort}${path}`, {
    method: 'POST',
    headers: token === undefined ? {} : { authorization: `Bearer ${token}` },
    body: JSON.stringify(body),
  });
  return { http: response.status, body: (await response.json()) as { status: string; message: string } };
}

describe('a cluster that grows by joins', () => {
  let joining: JoiningNodes;
  let ports: number[];
  const node = (id: string, i: number, extra: string[]): NodeProcess => joining.node(id, i, extra);

  before(async () => {
    // Three members, a lone joiner, and a port nothing listens on (the joiner's seed).
    joining = await JoiningNodes.create('cluster-join', 9, TOKEN);
    ports = joining.ports;
  });

  after(async () => {
    await joining.stop();
  });

  test('one node, then two join through it while a client writes; a joined node rejoins by itself', async () => {
    const a = node('a', 0, []);
    await a.start();
    const seed = ['--join', `127.0.0.1:${ports[1]}`];
    const client = await a.client();
    const acked: string[] = [];
    let writing = true;
    const writer = (async () => {
      for (let i = 0; writing; i++) {
        await client.set(`join-key-${i}`, `v${i}`);
        acked.push(`join-key-${i}`);
      }
    })();
    const b = node('b', 1, seed);
    const c = node('c', 2, seed);
    await Promise.all([b.start(), c.start()]);
    // A joined node serves once it is ready: admitted, holding the table, connected to its peers.
    const seen = acked.slice();
    for (const n of [b, c]) {
      assert.deepEqual(
        await (await n.client()).mget(...seen),
        seen.map((k) => `v${k.slice('join-key-'.length)}`),
      );
    }
    for (const n of [a, b, c]) {
      await eventually(() => allUp(n, ['a', 'b', 'c']), CONDITION_MS_MAX);
    }
    await eventually(() => acked.length > 50, CONDITION_MS_MAX);
    writing = false;
    await writer;
    // The CLI says so too, and exits 0 while every member is Up and reachable.
    const cli = spawnSync(
      process.execPath,
      [MAIN, 'cluster', 'members', '--admin-port', String(a.adminPort)],
      {
        encoding: 'utf8',
      },
    );
    assert.equal(cli.status, 0, cli.stderr);
    for (const id of ['a', 'b', 'c']) assert.match(cli.stdout, new RegExp(`^${id}\\s+Up\\b`, 'm'));
    // Every acknowledged write is served through every node (the joined ones forward to the holder).
    for (const n of [b, c]) {
      assert.deepEqual(
        await (await n.client()).mget(...acked),
        acked.map((k) => `v${k.slice('join-key-'.length)}`),
      );
    }
    // Restarted with neither --join nor --peers, b rejoins the members its data directory knows.
    const incarnation = (await membersAt(a)).find((m) => m.nodeId === 'b')!.incarnation;
    await b.stop();
    joining.nodes.splice(joining.nodes.indexOf(b), 1);
    const b2 = node('b', 1, []);
    await b2.start();
    await eventually(async () => {
      const seen = (await membersAt(a)).find((m) => m.nodeId === 'b');
      return seen !== undefined && seen.state === 'Up' && !seen.unreachable && seen.incarnation > incarnation;
    }, CONDITION_MS_MAX);
    await eventually(() => allUp(b2, ['a', 'b', 'c']), CONDITION_MS_MAX);
  });

  test('changes need the admin token; a removed member that comes back is refused', async () => {
    const a = joining.nodes.find((n) => n.id === 'a' && n.running);
    const c = joining.nodes.find((n) => n.id === 'c' && n.running);
    assert.ok(a !== undefined && c !== undefined);
    const unauthorized = await change(a, '/cluster/plan', { action: 'join', node: 'd' });
    assert.equal(unauthorized.http, 401);
    assert.equal(unauthorized.body.status, 'Unauthorized');
    const wrong = await change(a, '/cluster/plan', {}, `${TOKEN}x`);
    assert.equal(wrong.body.status, 'Unauthorized');
    const plan = await change(a, '/cluster/plan', { action: 'join', node: 'd' }, TOKEN);
    assert.equal(plan.body.status, 'Ok', plan.body.message);
    const early = await change(a, '/cluster/remove', { node: 'c' }, TOKEN);
    assert.equal(early.http, 409, 'only a Down member can be removed');

    await c.stop('SIGKILL');
    await eventually(
      async () => (await membersAt(a)).some((m) => m.nodeId === 'c' && m.state === 'Down'),
      CONDITION_MS_MAX,
    );
    const removed = await change(a, '/cluster/remove', { node: 'c' }, TOKEN);
    assert.equal(removed.body.status, 'Ok', removed.body.message);
    const from = c.log.length;
    joining.nodes.splice(joining.nodes.indexOf(c), 1);
    const back = node('c', 2, []);
    back.log = c.log;
    await back.start();
    await eventually(() => back.log.includes('this node was refused by the cluster', from), CONDITION_MS_MAX);
    const redis = await back.client();
    assert.match((await redis.cluster('INFO')) as string, /cluster_state:fail/);
    await assert.rejects(redis.get('join-key-0'), /refused by the cluster/);
    assert.ok((await membersAt(a)).some((m) => m.nodeId === 'c' && m.state === 'Removed'));
  });

  test('a joiner no member answered cannot leave: it is told to stop instead, and joins on', async () => {
    const x = node('x', 3, ['--join', `127.0.0.1:${ports[8]}`]);
    await x.start();
    const asked = await change(x, '/cluster/leave', {}, TOKEN);
    assert.equal(asked.http, 409, asked.body.message);
    assert.match(asked.body.message, /has not joined yet \(no member answered its join\): stop it instead/);
    assert.equal((await membersAt(x)).find((m) => m.nodeId === 'x')?.state, 'Joining');
    assert.ok(!x.log.includes('"msg":"every fragment handed over: leaving membership"'), x.log);
    await x.stop();
  });
});
