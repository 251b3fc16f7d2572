// Multi-node tests: real `tessera` processes on 127.0.0.1, each with its own data directory, RESP
// port and peer port, killed with real signals.

import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join as joinPath } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Redis } from 'ioredis';
import { freePorts } from '../../bench/ports.js';
import type { MovesReport } from '../../src/main/mesh/cluster.js';
import type { FragmentPlacement } from '../../src/main/node.js';
import { killedAfterTests, stopChild } from './children.js';
import { eventually, tempDir } from './helpers.js';
import { newClient } from './resp-helpers.js';

const MAIN = fileURLToPath(new URL('../../src/main.js', import.meta.url));
export const CLUSTER_SECRET = 'a-cluster-secret-of-at-least-32-bytes!';

export class NodeProcess {
  child: ChildProcess | undefined;
  /** Everything the process logged, across restarts. */
  log = '';
  private readonly clients: Redis[] = [];

  constructor(
    readonly id: string,
    readonly respPort: number,
    readonly peerPort: number,
    readonly dataDir: string,
    private readonly args: string[],
  ) {}

  /**
   * Starts the process (`env`: variables added to the environment; `launcher`: a command that runs
   * node, such as `nsenter … --`) and resolves once it logs `ready`.
   */
  async start(env: Readonly<Record<string, string>> = {}, launcher: readonly string[] = []): Promise<void> {
    const from = this.log.length;
    const command = [
      ...launcher,
      process.execPath,
      MAIN,
      '--node-id',
      this.id,
      '--port',
      String(this.respPort),
      '--data-dir',
      this.dataDir,
      ...this.args,
    ];
    const child = killedAfterTests(
      spawn(command[0]!, command.slice(1), {
        stdio: ['ignore', 'pipe', 'pipe'],
        env: { ...process.env, TESSERA_CLUSTER_SECRET: CLUSTER_SECRET, ...env },
      }),
    );
    this.child = child;
    child.stdout!.on('data', (chunk: Buffer) => {
      this.log += chunk.toString('utf8');
    });
    child.stderr!.on('data', (chunk: Buffer) => {
      this.log += chunk.toString('utf8');
    });
    const exited = new Promise<never>((_, reject) =>
      child.once('exit', (code) =>
        reject(new Error(`${this.id} exited (${code}) before ready:\n${this.log}`)),
      ),
    );
    await Promise.race([eventually(() => this.log.includes('"msg":"ready"', from), 30_000), exited]);
    exited.catch(() => {});
  }

  /** Sends `signal` and waits for the process to exit. */
  async stop(signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
    const child = this.child;
    this.child = undefined;
    for (const c of this.clients.splice(0)) c.disconnect();
    if (child !== undefined) await stopChild(child, signal);
  }

  /**
   * The exit code of the process started last once it exits by itself (a node that left), or
   * 'running' if it has not within `timeoutMs`.
   */
  exited(timeoutMs: number): Promise<number | null | 'running'> {
    const child = this.child!;
    if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve(child.exitCode);
    return new Promise((resolve) => {
      const timer = setTimeout(() => resolve('running'), timeoutMs);
      child.once('exit', (code) => {
        clearTimeout(timer);
        resolve(code);
      });
    });
  }

  /** An ioredis client; `readReplica` sends READONLY so reads use this node's own copy. */
  async client(readReplica = false): Promise<Redis> {
    const redis = newClient(this.respPort);
    this.clients.push(redis);
    if (readReplica) await redis.call('READONLY');
    return redis;
  }

  /** Started and not yet exited (a node that left exits by itself). */
  get running(): boolean {
    return this.child !== undefined && this.child.exitCode === null && this.child.signalCode === null;
  }

  /** The admin port its latest start named in its `ready` line (started with --admin-port). */
  get adminPort(): number {
    const ready = this.log.split('\n').findLast((l) => l.includes('"msg":"ready"'));
    const port = ready === undefined ? undefined : (JSON.parse(ready) as { adminPort?: number }).adminPort;
    if (port === undefined) throw new Error(`${this.id} has not logged an admin port`);
    return port;
  }
}

/** Whether `node` logged a line at or after `from` with message `msg` of which `fits` holds. */
export function logged(
  node: NodeProcess,
  from: number,
  msg: string,
  fits: (fields: Record<string, unknown>) => boolean,
): boolean {
  for (const line of node.log.slice(from).split('\n')) {
    if (!line.includes(`"msg":"${msg}"`)) continue;
    if (fits(JSON.parse(line) as Record<string, unknown>)) return true;
  }
  return false;
}

/** A `member event` log line: what membership decided about `member`, and when it logged it. */
export interface MemberEventLine {
  event: string;
  member: string;
  state: string;
  incarnation: number;
  /** Wall-clock ms of the line. */
  time: number;
}

/** The member events `node` logged at or after offset `from`, oldest first (whole lines only). */
export function memberEvents(node: NodeProcess, from: number): MemberEventLine[] {
  const text = node.log.slice(from, node.log.lastIndexOf('\n') + 1);
  return text
    .split('\n')
    .filter((line) => line.includes('"msg":"member event"'))
    .map((line) => JSON.parse(line) as MemberEventLine);
}

/** When `node` first logged `event` about `member` at or after offset `from`; undefined if it did not. */
export function memberEventTime(
  node: NodeProcess,
  from: number,
  event: string,
  member: string,
): number | undefined {
  return memberEvents(node, from).find((e) => e.event === event && e.member === member)?.time;
}

export interface ClusterFixture {
  nodes: NodeProcess[];
  /** Members listed as peers but never started (`startCluster`'s `phantomIds`). */
  phantoms: Array<{ id: string; peerPort: number }>;
  /** Resolves once every running node has every other running node connected. */
  connected(): Promise<void>;
  stop(): Promise<void>;
}

/**
 * Starts `ids.length` nodes with each other as peers (plus `phantomIds`: members that are listed
 * but never started, for tests that play one; their ports are in the fixture's `phantoms`). Extra
 * flags go to every node. If any node fails to start, the others are stopped before it throws.
 */
export async function startCluster(
  label: string,
  ids: string[],
  extraArgs: string[] = [],
  phantomIds: string[] = [],
  /** A command each node's process runs under (NodeProcess.start), such as `taskset -c 0`. */
  launcherOf: (id: string) => readonly string[] = () => [],
): Promise<ClusterFixture> {
  const dir = await tempDir(label);
  // Every port of the cluster from one call: two picked apart may be the same port.
  const free = await freePorts(2 * ids.length + phantomIds.length);
  const ports = ids.map((_, i) => ({ resp: free[2 * i], peer: free[2 * i + 1] }));
  const phantoms = phantomIds.map((id, i) => ({ id, peerPort: free[2 * ids.length + i] }));
  const peers = [
    ...ids.map((id, i) => `${id}@127.0.0.1:${ports[i].peer}`),
    ...phantoms.map((p) => `${p.id}@127.0.0.1:${p.peerPort}`),
  ].join(',');
  const nodes = ids.map(
    (id, i) =>
      new NodeProcess(id, ports[i].resp, ports[i].peer, `${dir.path}/${id}`, [
        '--peers',
        peers,
        '--workers',
        '2',
        '--fragments',
        '16',
        '--log-level',
        'info',
        ...extraArgs,
      ]),
  );
  const fixture: ClusterFixture = {
    nodes,
    phantoms,
    async connected() {
      const running = nodes.filter((n) => n.running);
      await eventually(async () => {
        for (const n of running) {
          const info = await infoOf(n, 'replication');
          if (Number(info.get('connected_slaves')) < running.length - 1) return false;
        }
        return true;
      }, 20_000);
    },
    async stop() {
      await Promise.all(nodes.map((n) => n.stop('SIGKILL')));
      await dir.cleanup();
    },
  };
  try {
    await Promise.all(nodes.map((n) => n.start({}, launcherOf(n.id))));
    await fixture.connected();
  } catch (err) {
    // A node that failed leaves the others running: stop them, or the test process never exits.
    await fixture.stop();
    throw err;
  }
  return fixture;
}

/**
 * Nodes that form a cluster by joins, each with its client and peer ports from one pool (`ports`,
 * two per slot, and any more asked for), an admin port and `token`, `--down-after 2s` and 8
 * fragments, plus the flags given to all: `node(id, slot, extra)` makes one (not started).
 */
export class JoiningNodes {
  readonly nodes: NodeProcess[] = [];

  private constructor(
    private readonly dir: Awaited<ReturnType<typeof tempDir>>,
    readonly ports: number[],
    private readonly token: string,
    private readonly common: readonly string[],
  ) {}

  static async create(
    label: string,
    ports: number,
    token: string,
    common: readonly string[] = [],
  ): Promise<JoiningNodes> {
    return new JoiningNodes(await tempDir(label), await freePorts(ports), token, common);
  }

  node(id: string, slot: number, extra: readonly string[]): NodeProcess {
    const n = new NodeProcess(
      id,
      this.ports[slot * 2]!,
      this.ports[slot * 2 + 1]!,
      `${this.dir.path}/${id}`,
      [
        '--peer-port',
        String(this.ports[slot * 2 + 1]),
        '--admin-port',
        '0',
        '--admin-token',
        this.token,
        '--down-after',
        '2s',
        '--fragments',
        '8',
        ...this.common,
        ...extra,
      ],
    );
    this.nodes.push(n);
    return n;
  }

  /** `--join` through the peer port of the node in `slot`. */
  joinVia(slot: number): string[] {
    return ['--join', `127.0.0.1:${this.ports[slot * 2 + 1]}`];
  }

  async stop(): Promise<void> {
    for (const n of this.nodes) await n.stop('SIGKILL');
    await this.dir.cleanup();
  }
}

/** A failed run's node logs, kept past the cluster's temp directory; returns where. */
export async function keepLogs(label: string, nodes: NodeProcess[]): Promise<string> {
  const dir = await mkdtemp(joinPath(tmpdir(), `tessera-${label}-`));
  for (const n of nodes) await writeFile(joinPath(dir, `${n.id}.log`), n.log);
  return dir;
}

/** How CLUSTER NODES at a node flags a member: ok, fail? (unreachable from there), fail (Down). */
export type Flag = 'ok' | 'fail?' | 'fail';

export async function flagOf(node: NodeProcess, member: string): Promise<Flag> {
  const redis = newClient(node.respPort);
  try {
    const text = String(await redis.call('CLUSTER', 'NODES'));
    const line = text.split('\n').find((l) => l.split(' ')[1]?.endsWith(`,${member}`));
    if (line === undefined) throw new Error(`no line for ${member} in CLUSTER NODES:\n${text}`);
    const flags = line.split(' ')[2].split(',');
    return flags.includes('fail') ? 'fail' : flags.includes('fail?') ? 'fail?' : 'ok';
  } finally {
    redis.disconnect();
  }
}

/** Whether every one of `observers` flags `member` with one of `flags`. */
export async function flaggedAt(
  observers: NodeProcess[],
  member: string,
  ...flags: Flag[]
): Promise<boolean> {
  for (const node of observers) if (!flags.includes(await flagOf(node, member))) return false;
  return true;
}

/** INFO `section` of a node as a map of its fields. */
export async function infoOf(node: NodeProcess, section: string): Promise<Map<string, string>> {
  const redis = newClient(node.respPort);
  try {
    const text = (await redis.info(section)) as string;
    const out = new Map<string, string>();
    for (const line of text.split('\r\n')) {
      const colon = line.indexOf(':');
      if (colon > 0) out.set(line.slice(0, colon), line.slice(colon + 1));
    }
    return out;
  } finally {
    redis.disconnect();
  }
}

/** Values of `keys` as this node's own copy holds them (READONLY reads). */
export function localValues(node: NodeProcess, keys: string[]): Promise<Array<string | null>> {
  return localReads(node, keys, (redis, batch) => redis.mget(...batch));
}

/** `localValues` as bytes. */
export function localBuffers(node: NodeProcess, keys: string[]): Promise<Array<Buffer | null>> {
  return localReads(node, keys, (redis, batch) => redis.mgetBuffer(...batch));
}

/** Key batch for one MGET of `localReads`. */
const LOCAL_READ_KEYS = 500;

async function localReads<T>(
  node: NodeProcess,
  keys: string[],
  read: (redis: Redis, batch: string[]) => Promise<T[]>,
): Promise<T[]> {
  const redis = newClient(node.respPort);
  try {
    await redis.call('READONLY');
    const out: T[] = [];
    for (let i = 0; i < keys.length; i += LOCAL_READ_KEYS)
      out.push(...(await read(redis, keys.slice(i, i + LOCAL_READ_KEYS))));
    return out;
  } finally {
    redis.disconnect();
  }
}

/** A node's admin path (started with --admin-port) as JSON. */
export async function adminGet<T>(node: NodeProcess, path: string): Promise<T> {
  const response = await fetch(`http://127.0.0.1:${node.adminPort}${path}`);
  return (await response.json()) as T;
}

/** A change POSTed to a node's admin port with `token`; its JSON answer. */
export async function adminPost<T>(
  node: NodeProcess,
  path: string,
  body: unknown,
  token: string,
): Promise<T> {
  const response = await fetch(`http://127.0.0.1:${node.adminPort}${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}` },
    body: JSON.stringify(body),
  });
  return (await response.json()) as T;
}

/**
 * Why the cluster has not settled, or '' once it has: every node holds the same table with no move
 * in flight, nothing under-replicated and no copy in transition, the fragments list exactly
 * `members`, and the coordinator's planner wants no more moves.
 */
export async function unsettled(
  nodes: NodeProcess[],
  members: string[],
  coordinator: NodeProcess,
  token: string,
): Promise<string> {
  const tables = new Set<string>();
  for (const n of nodes) {
    const moves = await adminGet<MovesReport>(n, '/cluster/moves');
    if (moves.inFlight.length > 0 || moves.underReplicated > 0 || moves.here.length > 0)
      return `${n.id}: ${JSON.stringify({ inFlight: moves.inFlight, under: moves.underReplicated, here: moves.here })}`;
    const placement = await adminGet<FragmentPlacement[]>(n, '/cluster/placement');
    tables.add(JSON.stringify(placement.map((f) => [f.generation, f.replicas])));
    const listed = [...new Set(placement.flatMap((f) => f.replicas))].sort();
    if (listed.join() !== [...members].sort().join()) return `${n.id} lists ${listed}`;
  }
  if (tables.size !== 1) return `${tables.size} different tables`;
  const plan = await adminPost<{ status: string; message: string; replicaMoves?: number }>(
    coordinator,
    '/cluster/plan',
    { action: 'now' },
    token,
  );
  return plan.status === 'Ok' && plan.replicaMoves === 0 ? '' : `the planner: ${plan.message}`;
}

/**
 * Waits until `unsettled` says nothing for the nodes `running()` gives and `members`, asking the
 * node `coordinator()` names (undefined: none yet), failing with what it said last. A node that
 * stops while it is asked (a leaver exits by itself) is asked about again.
 */
export async function settledWithin(
  running: () => NodeProcess[],
  members: string[],
  coordinator: () => Promise<NodeProcess | undefined>,
  token: string,
  timeoutMs: number,
): Promise<void> {
  let why = '';
  try {
    await eventually(async () => {
      const asked = await coordinator();
      if (asked === undefined) {
        why = 'no coordinator';
        return false;
      }
      try {
        why = await unsettled(running(), members, asked, token);
      } catch (err) {
        why = (err as Error).message;
      }
      return why === '';
    }, timeoutMs);
  } catch (err) {
    throw new Error(`${(err as Error).message}: ${why}`);
  }
}

/** One event of a node's `/cluster/events`. */
export interface ClusterEvent {
  kind: string;
  data: {
    member?: { nodeId: string };
    fragment?: number;
    reason?: string;
    target?: string;
    from?: string;
    to?: string;
  };
}

/** The node's `/cluster/events` from the first kept, read until `enough` holds of what came. */
export async function eventsUntil(
  node: NodeProcess,
  deadlineMs: number,
  enough: (events: ClusterEvent[]) => boolean,
): Promise<ClusterEvent[]> {
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), deadlineMs);
  const events: ClusterEvent[] = [];
  try {
    const response = await fetch(`http://127.0.0.1:${node.adminPort}/cluster/events?after=0`, {
      signal: abort.signal,
    });
    const decoder = new TextDecoder();
    let pending = '';
    for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
      pending += decoder.decode(chunk, { stream: true });
      let end = pending.indexOf('\n\n');
      while (end !== -1) {
        const block = pending.slice(0, end).split('\n');
        pending = pending.slice(end + 2);
        end = pending.indexOf('\n\n');
        const kind = block.find((l) => l.startsWith('event: '))?.slice('event: '.length);
        const data = block.find((l) => l.startsWith('data: '))?.slice('data: '.length);
        if (kind !== undefined && data !== undefined) events.push({ kind, data: JSON.parse(data) });
      }
      if (enough(events)) return events;
    }
    throw new Error('the event stream ended');
  } finally {
    clearTimeout(timer);
    abort.abort();
  }
}
