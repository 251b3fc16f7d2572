// The operator's read surface for membership over real TCP on 127.0.0.1: `GET /cluster/members`,
// the `GET /cluster/events` Server-Sent Events stream (replay, Last-Event-ID, the reader bound, a
// slow reader's overflow, keepalives, close), membership in /health, /cluster, /metrics and the
// status page — on three embedded nodes — and `tessera cluster status|members|events` against
// real processes, one of them stopped with SIGSTOP (connected, but unreachable to membership).

import assert from 'node:assert/strict';
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { get, type IncomingMessage } from 'node:http';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { isDeepStrictEqual } from 'node:util';
import pino from 'pino';
import { freePorts } from '../../bench/ports.js';
import {
  CLUSTER_EVENT_READER_QUEUE_BYTES_MAX,
  CLUSTER_EVENT_READERS_MAX,
  CLUSTER_EVENTS_KEPT,
} from '../../src/core/limits.js';
import type { MemberView } from '../../src/core/membership-types.js';
import { AdminServer } from '../../src/main/admin/server.js';
import type { MemberReport } from '../../src/main/mesh/cluster.js';
import { Tessera } from '../../src/main/node.js';
import { killedAfterTests } from './children.js';
import { CLUSTER_SECRET, type ClusterFixture, type NodeProcess, startCluster } from './cluster-helpers.js';
import { eventually, tempDir } from './helpers.js';

const MAIN = fileURLToPath(new URL('../../src/main.js', import.meta.url));
/** Generous: membership finds a silent member unreachable within a few probe rounds. */
const CONDITION_MS_MAX = 30_000;
/** Keepalive comments this often on the embedded nodes' streams, so a test sees one soon. */
const TEST_KEEPALIVE_MS = 100;

interface StreamEvent {
  id: string | undefined;
  type: string;
  data: Record<string, unknown>;
}

/** The events of a Server-Sent Events text, parsed as the format frames them (comments skipped). */
function parseEvents(text: string): StreamEvent[] {
  const events: StreamEvent[] = [];
  const blocks = text.split('\n\n');
  blocks.pop(); // an incomplete last block, or '' after the final blank line
  for (const block of blocks) {
    let id: string | undefined;
    let type = 'message';
    const data: string[] = [];
    for (const line of block.split('\n')) {
      if (line.startsWith('id: ')) id = line.slice(4);
      else if (line.startsWith('event: ')) type = line.slice(7);
      else if (line.startsWith('data: ')) data.push(line.slice(6));
    }
    if (data.length > 0) events.push({ id, type, data: JSON.parse(data.join('\n')) });
  }
  return events;
}

/** An open `/cluster/events` stream read as it arrives. */
class EventStream {
  raw = '';
  ended = false;
  private response: IncomingMessage | undefined;
  private destroy: () => void = () => {};

  /** Opens the stream; rejects unless the node answers 200 with an event stream. */
  static open(port: number, query = '', headers: Record<string, string> = {}): Promise<EventStream> {
    const stream = new EventStream();
    return new Promise((resolve, reject) => {
      const req = get({ host: '127.0.0.1', port, path: `/cluster/events${query}`, headers }, (res) => {
        const type = res.headers['content-type'];
        if (res.statusCode !== 200 || type !== 'text/event-stream; charset=utf-8') {
          res.destroy();
          return reject(new Error(`answered ${res.statusCode} (${type})`));
        }
        stream.response = res;
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          stream.raw += chunk;
        });
        res.on('close', () => {
          stream.ended = true;
        });
        resolve(stream);
      });
      req.on('error', reject);
      stream.destroy = () => req.destroy();
    });
  }

  get events(): StreamEvent[] {
    return parseEvents(this.raw);
  }

  /** Stops reading: the socket's buffers fill and the node's writes queue. */
  pause(): void {
    this.response?.pause();
  }

  resume(): void {
    this.response?.resume();
  }

  close(): void {
    this.destroy();
  }
}

/** A member view padded to fill a socket sooner (the slow-reader test appends thousands). */
function paddedView(nodeId: string): MemberView {
  return {
    nodeId,
    address: `127.0.0.1:1#${'x'.repeat(2_000)}`,
    incarnation: 1,
    state: 'Up',
    unreachable: false,
    suspect: false,
  };
}

interface MembersBody {
  nodeId: string;
  members: MemberReport[];
  localHealth: number;
  traffic: { datagramsSent: number; datagramsRefused: number };
  counters: { probes: number };
}

async function getJson<T>(port: number, path: string): Promise<{ status: number; body: T }> {
  const response = await fetch(`http://127.0.0.1:${port}${path}`);
  return { status: response.status, body: (await response.json()) as T };
}

/** One sample of the metrics page by its exact name and labels. */
async function metric(port: number, series: string): Promise<number | undefined> {
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

describe('three embedded nodes with admin servers', () => {
  const ids = ['a', 'b', 'c'];
  const nodes: Tessera[] = [];
  const admins: AdminServer[] = [];
  let dir: Awaited<ReturnType<typeof tempDir>>;
  const port = (i: number) => admins[i].address.port;

  before(async () => {
    dir = await tempDir('cluster-admin');
    const ports = await freePorts(ids.length);
    const peers = ids.map((id, i) => `${id}@127.0.0.1:${ports[i]}`).join(',');
    for (const id of ids) {
      const node = await Tessera.start({
        nodeId: id,
        dataDir: `${dir.path}/${id}`,
        peers,
        clusterSecret: CLUSTER_SECRET,
        fragments: 4,
        workers: 1,
        downAfterMs: 2_000,
      });
      nodes.push(node);
      admins.push(
        await AdminServer.listen(node, {
          port: 0,
          logger: pino({ level: 'silent' }),
          eventStreamKeepaliveMs: TEST_KEEPALIVE_MS,
        }),
      );
    }
    for (let i = 0; i < ids.length; i++) {
      await eventually(async () => {
        const { body } = await getJson<MembersBody>(port(i), '/cluster/members');
        return body.members.length === 3 && body.members.every((m) => m.connected && m.health === 'ok');
      }, CONDITION_MS_MAX);
    }
  });

  /** Members a test closed (the rest close after the tests). */
  const closed = new Set<number>();

  after(async () => {
    for (let i = 0; i < nodes.length; i++) {
      if (closed.has(i)) continue;
      await admins[i]?.close();
      await nodes[i].close();
    }
    await dir?.cleanup();
  });

  test('/cluster/members lists every member Up, reachable, connected and ok; /health, /cluster, /metrics and the page agree', async () => {
    const { status, body } = await getJson<MembersBody>(port(0), '/cluster/members');
    assert.equal(status, 200);
    assert.equal(body.nodeId, 'a');
    assert.deepEqual(
      body.members.map((m) => [m.nodeId, m.self, m.state, m.unreachable, m.suspect, m.connected, m.health]),
      [
        ['a', true, 'Up', false, false, true, 'ok'],
        ['b', false, 'Up', false, false, true, 'ok'],
        ['c', false, 'Up', false, false, true, 'ok'],
      ],
    );
    for (const m of body.members) {
      assert.deepEqual(m.reporters, []);
      assert.ok(Number.isSafeInteger(m.incarnation) && m.incarnation >= 0, `${m.nodeId}: ${m.incarnation}`);
      assert.match(m.address, /^127\.0\.0\.1:\d+$/);
    }
    assert.equal(body.localHealth, 1);
    await eventually(async () => {
      const { body: later } = await getJson<MembersBody>(port(0), '/cluster/members');
      return later.traffic.datagramsSent > 0 && later.counters.probes > 0;
    });

    type HealthBody = {
      state: string;
      cluster: {
        peers: Array<{
          id: string;
          membership: { state: string; unreachable: boolean; incarnation: number };
        }>;
      };
    };
    const health = await getJson<HealthBody>(port(0), '/health');
    assert.equal(health.body.state, 'healthy');
    // Read together until no gossip changed an incarnation between the two reads.
    await eventually(async () => {
      const [members, again] = [
        await getJson<MembersBody>(port(0), '/cluster/members'),
        await getJson<HealthBody>(port(0), '/health'),
      ];
      const expected = members.body.members
        .filter((m) => !m.self)
        .map((m) => [m.nodeId, { state: 'Up', unreachable: false, incarnation: m.incarnation }]);
      return isDeepStrictEqual(
        again.body.cluster.peers.map((p) => [p.id, p.membership]),
        expected,
      );
    });
    const cluster = await getJson<HealthBody['cluster']>(port(0), '/cluster');
    assert.deepEqual(
      cluster.body.peers.map((p) => [p.id, p.membership.state, p.membership.unreachable]),
      [
        ['b', 'Up', false],
        ['c', 'Up', false],
      ],
    );

    assert.equal(await metric(port(0), 'tessera_cluster_members{state="Up"}'), 3);
    assert.equal(await metric(port(0), 'tessera_cluster_members{state="Down"}'), 0);
    assert.equal(await metric(port(0), 'tessera_member_unreachable{peer="c"}'), 0);
    assert.equal(await metric(port(0), 'tessera_membership_local_health'), 1);
    assert.ok((await metric(port(0), 'tessera_membership_datagrams_sent_total'))! > 0);
    assert.equal(await metric(port(0), 'tessera_membership_datagrams_refused_total'), 0);

    const page = await (await fetch(`http://127.0.0.1:${port(0)}/`)).text();
    assert.match(page, /<div id="members"><h2>Members<\/h2>/, 'not highlighted while every member is ok');
    assert.match(
      page,
      /<tr><td>a \(this node\)<\/td><td>Up<\/td><td>reachable<\/td><td>\d+<\/td><td>ok<\/td><\/tr>/,
    );
  });

  test('a change forwarded to a member that is not the coordinator is answered Conflict naming the coordinator, not forwarded on', async () => {
    await eventually(
      () =>
        nodes[0].cluster!.coordinator?.role === 'coordinator' &&
        nodes[2].cluster!.coordinator?.coordinator?.id === 'a',
      CONDITION_MS_MAX,
    );
    const exchange = nodes[1].cluster!.admin;
    const asked = exchange.counters.asked;
    const refused = await exchange.ask(
      'c',
      { kind: 'change', path: '/cluster/plan', body: {} },
      CONDITION_MS_MAX,
    );
    assert.deepEqual(refused, {
      status: 'Conflict',
      message: 'node c is not the coordinator; it names a',
      result: { coordinator: 'a' },
    });
    assert.equal(nodes[2].cluster!.admin.counters.asked, 0, 'c asked nobody');
    const atCoordinator = await exchange.ask(
      'a',
      { kind: 'change', path: '/cluster/plan', body: {} },
      CONDITION_MS_MAX,
    );
    assert.equal(atCoordinator.status, 'Ok', atCoordinator.message);
    assert.equal(atCoordinator.result.executedBy, 'a');
    const leave = await exchange.ask(
      'a',
      { kind: 'change', path: '/cluster/leave', body: {} },
      CONDITION_MS_MAX,
    );
    assert.equal(leave.status, 'BadRequest', 'leave is never executed for another node');
    // An embedded node has no RESP server: its sample has no RESP counters.
    const sample = await exchange.ask('c', { kind: 'metrics' }, CONDITION_MS_MAX);
    assert.equal(sample.status, 'Ok', sample.message);
    assert.equal(sample.result.nodeId, 'c');
    assert.equal(sample.result.resp, undefined);
    assert.equal(exchange.counters.asked, asked + 4);
  });

  test('a stream replays the kept events, sends MemberUnreachable when c closes, and Last-Event-ID resumes after it', async () => {
    const first = await EventStream.open(port(0));
    await eventually(() => first.events.filter((e) => e.type === 'Initialized').length === 3);
    const initialized = first.events.slice(0, 3);
    assert.deepEqual(
      initialized.map((e) => [e.id, e.data.sequence, (e.data.member as MemberView).nodeId]),
      [
        ['1', 1, 'a'],
        ['2', 2, 'b'],
        ['3', 3, 'c'],
      ],
    );
    assert.match(String(initialized[0].data.at), /^\d{4}-\d\d-\d\dT[0-9:.]+Z$/);
    assert.equal(initialized[0].data.kind, 'Initialized');
    await eventually(() => first.raw.includes(': keepalive\n\n'));
    const beforeClose = Number(first.events.at(-1)!.id);

    // c's own stream ends when its admin server closes, and close does not wait for the reader.
    const onC = await EventStream.open(port(2));
    closed.add(2);
    await admins[2].close();
    await eventually(() => onC.ended);
    await nodes[2].close();

    const unreachable = (s: EventStream) =>
      s.events.find((e) => e.type === 'MemberUnreachable' && (e.data.member as MemberView).nodeId === 'c');
    await eventually(() => unreachable(first) !== undefined, CONDITION_MS_MAX);
    const event = unreachable(first)!;
    assert.equal((event.data.member as MemberView).unreachable, true);
    assert.equal(event.id, String(event.data.sequence));

    // Resuming after the last event seen before c closed: exactly the events after it, once each.
    const last = nodes[0].cluster!.events.lastSequence;
    const resumed = await EventStream.open(port(0), '', { 'Last-Event-ID': String(beforeClose) });
    const byQuery = await EventStream.open(port(0), `?after=${beforeClose}`);
    await eventually(() => first.events.length > 0 && Number(first.events.at(-1)!.id) >= last);
    for (const s of [resumed, byQuery]) {
      await eventually(() => s.events.length >= last - beforeClose);
      const expected = first.events.filter((e) => Number(e.id) > beforeClose && Number(e.id) <= last);
      assert.deepEqual(s.events.slice(0, last - beforeClose), expected);
      assert.ok(s.events.every((e) => Number(e.id) > beforeClose));
      s.close();
    }

    const members = await getJson<MembersBody>(port(0), '/cluster/members');
    const c = members.body.members.find((m) => m.nodeId === 'c')!;
    assert.equal(c.connected, false);
    assert.notEqual(c.health, 'ok');
    const page = await (await fetch(`http://127.0.0.1:${port(0)}/`)).text();
    assert.match(
      page,
      /<div id="members" class="degraded"><h2>Members<\/h2><p><strong>Not ok<\/strong>: c \(p?fail\)/,
    );
    assert.match(page, /<tr class="not-ok"><td>c<\/td>/);
    first.close();
  });

  test('readers past CLUSTER_EVENT_READERS_MAX are refused with 503, and one more is served once one goes', async () => {
    const streams: EventStream[] = [];
    try {
      for (let i = 0; i < CLUSTER_EVENT_READERS_MAX; i++) streams.push(await EventStream.open(port(1)));
      const refused = await getJson<{ error: string }>(port(1), '/cluster/events');
      assert.equal(refused.status, 503);
      assert.match(refused.body.error, /event streams are open/);
      streams.shift()!.close();
      await eventually(async () => {
        const response = await fetch(`http://127.0.0.1:${port(1)}/cluster/events`, { method: 'HEAD' });
        return response.status === 200;
      });
      streams.push(await EventStream.open(port(1)));
    } finally {
      for (const s of streams) s.close();
    }
  });

  test('a malformed Last-Event-ID is refused with 400; one past the newest event (a restarted node) replays from the start', async () => {
    const bad = await fetch(`http://127.0.0.1:${port(1)}/cluster/events`, {
      headers: { 'Last-Event-ID': 'x1' },
    });
    assert.equal(bad.status, 400);
    assert.match(
      ((await bad.json()) as { error: string }).error,
      /Last-Event-ID must be an event sequence number/,
    );
    assert.equal((await fetch(`http://127.0.0.1:${port(1)}/cluster/events?after=-1`)).status, 400);
    const stream = await EventStream.open(port(1), '?after=1000000');
    try {
      await eventually(() => stream.events.length >= 2);
      assert.deepEqual(stream.events[0], {
        id: undefined,
        type: 'overflow',
        data: { reason: 'restarted', lost: 0, resumeFrom: 1 },
      });
      assert.equal(stream.events[1].id, '1');
    } finally {
      stream.close();
    }
  });

  test('a reader that does not drain is ended with an overflow naming where to resume; resuming then says what slid out', async () => {
    const log = nodes[1].cluster!.events;
    const slow = await EventStream.open(port(1));
    await eventually(() => slow.events.length > 0);
    slow.pause();
    // Far more than the socket buffers on both ends and the reader's bound hold.
    const appendedBytesMin = 64 * 1024 * 1024 + CLUSTER_EVENT_READER_QUEUE_BYTES_MAX;
    const padded = paddedView('x');
    const eventBytes = JSON.stringify(padded).length;
    for (let bytes = 0; bytes < appendedBytesMin; bytes += eventBytes) {
      log.append('MemberUpdated', Date.now(), { member: padded, memberSequence: 0 });
    }
    slow.resume();
    await eventually(() => slow.ended, CONDITION_MS_MAX);
    const events = slow.events;
    const overflow = events.at(-1)!;
    assert.equal(overflow.type, 'overflow');
    assert.equal(overflow.id, undefined);
    assert.equal(overflow.data.reason, 'slow');
    assert.equal(overflow.data.lost, 0);
    const sent = events.slice(0, -1).map((e) => Number(e.id));
    assert.deepEqual(
      sent,
      sent.map((_, i) => sent[0] + i),
      'every event up to the cut, in order, none skipped',
    );
    assert.equal(overflow.data.resumeFrom, sent.at(-1)! + 1);
    assert.ok(sent.at(-1)! < log.lastSequence - CLUSTER_EVENTS_KEPT, 'cut long before the last event');

    // By now the events after the cut slid out of the log: a reader resuming there is told so.
    const resumeAfter = sent.at(-1)!;
    const resumed = await EventStream.open(port(1), '', { 'Last-Event-ID': String(resumeAfter) });
    try {
      await eventually(() => resumed.events.length >= 2, CONDITION_MS_MAX);
      assert.deepEqual(resumed.events[0], {
        id: undefined,
        type: 'overflow',
        data: { reason: 'lost', lost: log.firstSequence - (resumeAfter + 1), resumeFrom: log.firstSequence },
      });
      assert.equal(resumed.events[1].id, String(log.firstSequence));
    } finally {
      resumed.close();
    }
  });
});

test('a node without peers answers 404 for /cluster/members and /cluster/events', async () => {
  const dir = await tempDir('cluster-admin-single');
  const node = await Tessera.start({ dataDir: dir.path, fragments: 2, workers: 1 });
  const admin = await AdminServer.listen(node, { port: 0, logger: pino({ level: 'silent' }) });
  try {
    for (const path of ['/cluster/members', '/cluster/events']) {
      const { status, body } = await getJson<{ error: string }>(admin.address.port, path);
      assert.equal(status, 404, path);
      assert.equal(body.error, 'this node has no peers');
    }
    const page = await (await fetch(`http://127.0.0.1:${admin.address.port}/`)).text();
    assert.ok(!page.includes('<h2>Members</h2>'));
  } finally {
    await admin.close();
    await node.close();
    await dir.cleanup();
  }
});

/** `tessera cluster …` against a node's admin port. */
function cluster(
  node: NodeProcess,
  ...args: string[]
): { code: number | null; stdout: string; stderr: string } {
  const run = spawnSync(
    process.execPath,
    [MAIN, 'cluster', ...args, '--admin-port', String(node.adminPort)],
    {
      encoding: 'utf8',
    },
  );
  return { code: run.status, stdout: run.stdout, stderr: run.stderr };
}

/** `tessera cluster events …` left running; its output as it comes. */
function follow(
  node: NodeProcess,
  ...args: string[]
): { child: ChildProcess; output: () => string; exited: Promise<number | null> } {
  const child = killedAfterTests(
    spawn(process.execPath, [MAIN, 'cluster', 'events', ...args, '--admin-port', String(node.adminPort)], {
      stdio: ['ignore', 'pipe', 'pipe'],
    }),
  );
  let out = '';
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
    out += chunk;
  });
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => {
    out += chunk;
  });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return { child, output: () => out, exited };
}

describe('tessera cluster status, members and events against three processes', () => {
  let fixture: ClusterFixture;

  before(async () => {
    fixture = await startCluster('cluster-cli', ['a', 'b', 'c'], ['--admin-port', '0', '--down-after', '2s']);
  });

  after(async () => {
    if (fixture !== undefined) {
      fixture.nodes[2].child?.kill('SIGCONT');
      await fixture.stop();
    }
  });

  test('all Up: exit 0; c stopped (connected, unreachable): exit 1 naming it, and the events follow', async () => {
    const [a, , c] = fixture.nodes;
    await eventually(() => cluster(a, 'members').code === 0, CONDITION_MS_MAX);
    const members = cluster(a, 'members');
    assert.match(members.stdout, /^member +state +flags +incarnation +address\n/);
    assert.match(members.stdout, /\na +Up +self +\d+ +127\.0\.0\.1:\d+\n/);
    assert.match(members.stdout, /\nc +Up +- +\d+ +127\.0\.0\.1:\d+\n/);
    const json = JSON.parse(cluster(a, 'members', '--json').stdout) as MembersBody;
    assert.deepEqual(
      json.members.map((m) => m.nodeId),
      ['a', 'b', 'c'],
    );
    const status = cluster(a, 'status');
    assert.equal(status.code, 0, status.stdout + status.stderr);
    assert.match(status.stdout, /^cluster state ok; node a healthy\n/);
    assert.match(status.stdout, /\n {2}b +Up +reachable +incarnation \d+ +ok\n/);
    // Every member holds each of the 16 fragments (R=3) and serves an even share: 6, 5 and 5.
    const placement = cluster(a, 'placement');
    assert.equal(placement.code, 0, placement.stderr);
    const perMember = placement.stdout.slice(placement.stdout.indexOf('\n\nmember'));
    const serving = [...perMember.matchAll(/\n([abc]) +16 +(\d+)/g)].map((m) => [m[1], Number(m[2])]);
    assert.deepEqual(
      serving.map(([id]) => id),
      ['a', 'b', 'c'],
      placement.stdout,
    );
    assert.deepEqual(serving.map(([, n]) => n).sort(), [5, 5, 6], placement.stdout);
    // Each node's INFO says the same of itself.
    for (const [i, node] of fixture.nodes.entries()) {
      const info = (await (await node.client()).info('cluster')) as string;
      assert.match(info, /\r\ncluster_fragments_held:16\r\n/);
      assert.match(info, new RegExp(`\r\ncluster_fragments_serving:${serving[i]![1]}\r\n`), info);
    }

    const events = follow(a, '--json');
    await eventually(
      () =>
        events
          .output()
          .split('\n')
          .filter((l) => l.includes('"Initialized"')).length === 3,
    );
    const lastBefore = (JSON.parse(events.output().trim().split('\n').at(-1)!) as { sequence: number })
      .sequence;

    c.child!.kill('SIGSTOP');
    const unreachableLine = () =>
      events
        .output()
        .split('\n')
        .find((l) => l.includes('"kind":"MemberUnreachable"') && l.includes('"nodeId":"c"'));
    await eventually(() => unreachableLine() !== undefined, CONDITION_MS_MAX);
    const health = await getJson<{
      state: string;
      peersDown: Array<{ id: string }>;
      cluster: {
        peers: Array<{
          id: string;
          connected: boolean;
          downSince?: string;
          membership: { unreachable: boolean };
        }>;
      };
    }>(a.adminPort, '/health');
    const peerC = health.body.cluster.peers.find((p) => p.id === 'c')!;
    // Still connected over TCP (the kernel answers for a stopped process), yet down: requests do
    // not go to it, and /health says so.
    assert.equal(peerC.connected, true);
    assert.equal(peerC.membership.unreachable, true);
    assert.equal(health.body.state, 'degraded');
    assert.deepEqual(
      health.body.peersDown.map((p) => p.id),
      ['c'],
    );
    assert.ok(peerC.downSince !== undefined);

    const downStatus = cluster(a, 'status');
    assert.equal(downStatus.code, 1, downStatus.stdout);
    assert.match(downStatus.stdout, /^cluster state ok; node a degraded \(peers down: c since /);
    assert.match(
      downStatus.stdout,
      /\n {2}c +(Up|Down) +unreachable +incarnation \d+ +p?fail +down since \d{4}-/,
    );
    const downMembers = cluster(a, 'members');
    assert.equal(downMembers.code, 1);
    assert.match(downMembers.stdout, /\nc +(Up|Down) +unreachable/);

    // Resuming after the last event before the stop prints the events after it, from the first.
    const resumed = follow(a, '--after', String(lastBefore));
    await eventually(() => / MemberUnreachable c /.test(resumed.output()), CONDITION_MS_MAX);
    const firstLine = resumed.output().split('\n')[0];
    assert.match(firstLine, new RegExp(`^\\d{4}-[0-9T:.-]+Z #${lastBefore + 1} `));

    for (const f of [events, resumed]) {
      f.child.kill('SIGINT');
      assert.equal(await f.exited, 0, f.output());
    }
  });
});
