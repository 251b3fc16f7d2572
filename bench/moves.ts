// Replica moves on real processes on loopback (not a test: run it by hand, read the figures).
//
//   npm run build:test && node .build/bench/moves.js [flags]
//
//   1. join: 3 nodes (R=3) hold --mib-per-node of data and, once anti-entropy has verified their
//      copies against each other's (as in a cluster that has run a minute), serve a steady GET/SET
//      load (the load harness's driver, one per node, closed loop or --rate); a 4th node joins. Printed: throughput
//      and p99 per 1-second window, the dip (worst window from the join until the table settles
//      against the mean before it; goal ≤ 15 %), the p99 ratio (worst window against the median
//      window's p99 before it; goal ≤ 2×), the time from the join until the table settles (no move in flight, nothing
//      copying or handing over, the planner wants nothing), and the replica moves counted against
//      the optimum R·F/(N+1); the nodes' CPU per operation (process CPU time / operations) during
//      the join against before it; the four nodes' throughput and CPU per operation after it; the
//      handoffs' targets that needed no round and those that pulled the copy whole.
//   2. down: 4 nodes (R=3) hold --mib-per-node each; one is SIGKILLed. Printed: the time from the
//      kill to Down and from Down to no fragment under-replicated (GET /cluster/moves), the bytes
//      each node held, the copy rate (the victim's bytes over the time from Down to none short) and
//      from it the time 1 GiB per node would take: a projection, not a measurement; the survivors'
//      CPU over that time, per MiB copied; their catch-ups of the fragments the victim served first
//      (from their logs), apart from those at the nodes' start; and, before the kill, the settled
//      cluster's CPU without load over --idle-watch.
//
// Flags: --parts join,down (both), --mib-per-node M (64; the goal is stated for 1024: the down part
// loads that in ~1.5 min on 2 cores and runs ~4 min in all), --value-bytes B (1024), --fragments F (16),
// --connections C per node (8), --read-ratio X (0.5), --rate R (open loop at R operations a second
// in all; default closed loop), --before D (10s of load before the join), --after D (5s after it
// settles), --settle-max D (5m), --down-after D (5s), --store S (lmdb), --workers W (1 per node),
// --move-rate R (every node's --move-rate; the node's default), --idle-watch D (3s; a minute shows
// routine anti-entropy's steady cost), --seed S (1), --keep-logs (the nodes' logs are kept, and where is printed, after a run that
// succeeded too; always after one that failed), --node-cores A:B:C:D (each node runs on those cores,
// `taskset -c` lists, such as 0-3:4-7:8-11:12-15, or 0:0:0:1 to give the joiner a core of its own;
// run the bench itself under `taskset -c` to keep the clients off them). Durations as the node takes them: 250ms, 2s, 5m. Progress goes to stderr, the
// figures to stdout.

import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { Keyspace } from '../src/core/keyspace.js';
import { parseDuration } from '../src/main/cli-args.js';
import type { MovesReport } from '../src/main/mesh/cluster.js';
import type { FragmentPlacement } from '../src/main/node.js';
import {
  adminGet,
  adminPost,
  type ClusterFixture,
  infoOf,
  keepLogs,
  memberEventTime,
  NodeProcess,
  startCluster,
  unsettled,
} from '../test/integration/cluster-helpers.js';
import { eventually, sleep } from '../test/integration/helpers.js';
import { median } from './common.js';
import { Driver, type PhaseResult, SERIES_INTERVAL_MS } from './load/driver.js';
import { LatencyHistogram } from './load/histogram.js';
import { LOAD_CONNECTIONS_MAX, LOAD_PIPELINE } from './load/options.js';
import { Random } from './load/random.js';
import { KEY_DIGITS, RequestTemplates } from './load/request-writer.js';
import {
  KeySpace,
  PreloadSource,
  SCAN_LENGTH_MAX_DEFAULT,
  WorkloadSource,
  workloadSpec,
} from './load/workloads.js';
import { ZIPFIAN_THETA_DEFAULT } from './load/zipfian.js';
import { freePorts } from './ports.js';

const TOKEN = 'an-admin-token-for-the-moves-bench';
const REPLICAS = 3;
const KEY_PREFIX = 'load:';
const MIB = 1024 * 1024;
const GIB = 1024 * MIB;
/** How long a cluster may take to form, load, or catch up its replicas before the run gives up. */
const CONDITION_MS_MAX = 300_000;
/** Between polls of the admin ports while a join or a re-replication runs. */
const POLL_INTERVAL_MS = 250;
/** A request unanswered this long fails as a timeout (the harness's default). */
const REQUEST_TIMEOUT_MS = 10_000;
/** Linux's USER_HZ: /proc's CPU times are in ticks of 10 ms. */
const PROC_TICK_MS = 10;
/** The first window of the load is left out: connections open, code warms up. */
const WARMUP_WINDOWS = 1;

interface Options {
  parts: Set<string>;
  mibPerNode: number;
  valueBytes: number;
  fragments: number;
  connections: number;
  readRatio: number;
  rate: number | undefined;
  beforeMs: number;
  afterMs: number;
  settleMsMax: number;
  downAfterMs: number;
  store: string;
  workers: number;
  /** `--move-rate` for every node, as the node parses it; its default when absent. */
  moveRate: string | undefined;
  /** How long the down part watches the loaded, settled cluster's CPU before the kill. */
  idleWatchMs: number;
  seed: number;
  keepLogs: boolean;
  /** Per node (a, b, c, d), the cores it runs on (`taskset -c`); empty: unpinned. */
  nodeCores: string[];
}

function parseOptions(argv: string[]): Options {
  const { values } = parseArgs({
    args: argv,
    options: {
      parts: { type: 'string', default: 'join,down' },
      'mib-per-node': { type: 'string', default: '64' },
      'value-bytes': { type: 'string', default: '1024' },
      fragments: { type: 'string', default: '16' },
      connections: { type: 'string', default: '8' },
      'read-ratio': { type: 'string', default: '0.5' },
      rate: { type: 'string' },
      before: { type: 'string', default: '10s' },
      after: { type: 'string', default: '5s' },
      'settle-max': { type: 'string', default: '5m' },
      'down-after': { type: 'string', default: '5s' },
      store: { type: 'string', default: 'lmdb' },
      workers: { type: 'string', default: '1' },
      'move-rate': { type: 'string' },
      'idle-watch': { type: 'string', default: '3s' },
      seed: { type: 'string', default: '1' },
      'keep-logs': { type: 'boolean', default: false },
      'node-cores': { type: 'string', default: '' },
    },
  });
  const o: Options = {
    parts: new Set(values.parts.split(',')),
    mibPerNode: Number(values['mib-per-node']),
    valueBytes: Number(values['value-bytes']),
    fragments: Number(values.fragments),
    connections: Number(values.connections),
    readRatio: Number(values['read-ratio']),
    rate: values.rate === undefined ? undefined : Number(values.rate),
    beforeMs: parseDuration(values.before),
    afterMs: parseDuration(values.after),
    settleMsMax: parseDuration(values['settle-max']),
    downAfterMs: parseDuration(values['down-after']),
    store: values.store,
    workers: Number(values.workers),
    moveRate: values['move-rate'],
    idleWatchMs: parseDuration(values['idle-watch']),
    seed: Number(values.seed),
    keepLogs: values['keep-logs'],
    nodeCores: values['node-cores'] === '' ? [] : values['node-cores'].split(':'),
  };
  if (!(o.mibPerNode > 0)) throw new Error('--mib-per-node must be positive');
  if (!Number.isInteger(o.valueBytes) || o.valueBytes < 1) throw new Error('--value-bytes must be 1 or more');
  if (!Number.isInteger(o.connections) || o.connections < 1)
    throw new Error('--connections must be 1 or more');
  if (!(o.readRatio >= 0 && o.readRatio <= 1)) throw new Error('--read-ratio must be 0..1');
  if (o.rate !== undefined && !(o.rate > 0)) throw new Error('--rate must be positive');
  if (o.beforeMs < 2 * SERIES_INTERVAL_MS) throw new Error('--before must be at least 2s');
  if (
    o.nodeCores.length > 0 &&
    (o.nodeCores.length !== 4 || !o.nodeCores.every((c) => /^[0-9][0-9,-]*$/.test(c)))
  )
    throw new Error('--node-cores takes four core lists as taskset -c does, for a:b:c:d (such as 0:0:0:1)');
  return o;
}

const progress = (line: string) => process.stderr.write(`${line}\n`);
const nodeIds = (n: number) => Array.from({ length: n }, (_, i) => String.fromCharCode(97 + i));
/** Bytes of one record as the load writes it: its key and its value. */
const recordBytes = (o: Options) => KEY_PREFIX.length + KEY_DIGITS + o.valueBytes;

/** What node `id` runs under: `taskset -c` with its cores from --node-cores, or nothing. */
const launcherOf = (o: Options) => (id: string) =>
  o.nodeCores.length === 0 ? [] : ['taskset', '-c', o.nodeCores[id.charCodeAt(0) - 97]!];

/** Flags of every node of a run, after startCluster's. */
const nodeArgs = (o: Options) => [
  '--workers',
  String(o.workers),
  '--fragments',
  String(o.fragments),
  '--store',
  o.store,
  '--replicas',
  String(REPLICAS),
  '--down-after',
  `${o.downAfterMs}ms`,
  '--admin-port',
  '0',
  '--admin-token',
  TOKEN,
  ...(o.moveRate === undefined ? [] : ['--move-rate', o.moveRate]),
];

// ── The admin port ────────────────────────────────────────────────────────────────────────────

const getJson = adminGet;

function postJson<T>(node: NodeProcess, path: string, body: unknown): Promise<T> {
  return adminPost<T>(node, path, body, TOKEN);
}

interface PlanAnswer {
  status: string;
  message: string;
  replicaMoves?: number;
}

/** Polls `unsettled` until it says nothing; resolves with the wall-clock ms it first did. */
async function settledAt(
  nodes: NodeProcess[],
  members: string[],
  coordinator: NodeProcess,
  deadlineMs: number,
): Promise<number> {
  let why = '';
  let said = '';
  const giveUpMs = Date.now() + deadlineMs;
  for (;;) {
    why = await unsettled(nodes, members, coordinator, TOKEN);
    if (why === '') return Date.now();
    if (why !== said) progress(`  not settled: ${why}`);
    said = why;
    if (Date.now() > giveUpMs) {
      const moves = await Promise.all(nodes.map((n) => getJson<MovesReport>(n, '/cluster/moves')));
      const state = moves.map(
        (m, i) => `${nodes[i].id}: ${JSON.stringify({ inFlight: m.inFlight, here: m.here })}`,
      );
      throw new Error(`not settled within ${deadlineMs} ms: ${why}\n${state.join('\n')}`);
    }
    await sleep(POLL_INTERVAL_MS);
  }
}

async function coordinatorCounters(node: NodeProcess): Promise<Record<string, number>> {
  return (await getJson<MovesReport>(node, '/cluster/moves')).coordinator;
}

// ── Load ──────────────────────────────────────────────────────────────────────────────────────

/** CPU time of a whole process (every thread), in ms, from /proc. */
function processCpuMs(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  // utime and stime: fields 14 and 15 of the whole line.
  return (Number(fields[11]) + Number(fields[12])) * PROC_TICK_MS;
}

const templatesOf = (o: Options) =>
  new RequestTemplates(KEY_PREFIX, Buffer.alloc(o.valueBytes, 'v'.charCodeAt(0)));

/** SETs keys 0 … keys-1 through `node` with the harness's preload shape; fails on any error. */
async function preload(o: Options, node: NodeProcess, keys: number): Promise<void> {
  const startedMs = Date.now();
  const driver = new Driver(
    {
      connections: LOAD_CONNECTIONS_MAX,
      pipeline: LOAD_PIPELINE,
      ops: keys,
      durationMs: undefined,
      rate: undefined,
      timeoutMs: REQUEST_TIMEOUT_MS * 3,
    },
    { host: '127.0.0.1', port: node.respPort, password: undefined },
    templatesOf(o),
    new PreloadSource(),
  );
  const result = await driver.run();
  const failed = result.failed.reduce((x, y) => x + y, 0);
  if (failed > 0 || result.errors.size > 0)
    throw new Error(`preload: ${failed} SETs failed: ${JSON.stringify([...result.errors])}`);
  const seconds = (Date.now() - startedMs) / 1000;
  progress(
    `  loaded ${keys} keys (${((keys * recordBytes(o)) / MIB).toFixed(1)} MiB) in ${seconds.toFixed(1)} s`,
  );
}

/** Every node's replication senders have nothing left to send. */
/**
 * Waits until anti-entropy has verified each node's copies against the other replicas' (as in a
 * cluster that has run a minute or more: the first routine rounds come 30–90 s after a start), so
 * that the join's handoffs find them verified; returns how long that took.
 */
async function copiesVerified(nodes: NodeProcess[]): Promise<number> {
  const startMs = Date.now();
  await eventually(async () => {
    for (const n of nodes) if ((await getJson<MovesReport>(n, '/cluster/moves')).unverified > 0) return false;
    return true;
  }, CONDITION_MS_MAX);
  progress(
    `  every copy verified against the other replicas ${((Date.now() - startMs) / 1000).toFixed(1)} s after the preload`,
  );
  return Date.now() - startMs;
}

async function replicated(nodes: NodeProcess[]): Promise<void> {
  await eventually(async () => {
    for (const n of nodes)
      if (Number((await infoOf(n, 'replication')).get('replication_backlog_ops')) > 0) return false;
    return true;
  }, CONDITION_MS_MAX);
}

/** One load driver per node, mixed GET/SET over the loaded keys, with a latency histogram per second. */
class ClusterLoad {
  readonly drivers: Driver[];
  private runs: Array<Promise<PhaseResult>> = [];

  constructor(o: Options, nodes: NodeProcess[], keys: number, durationMs: number) {
    const spec = workloadSpec('mixed', o.readRatio);
    this.drivers = nodes.map((n, i) => {
      const random = new Random(o.seed + i);
      return new Driver(
        {
          connections: o.connections,
          pipeline: 1,
          ops: undefined,
          durationMs,
          rate: o.rate === undefined ? undefined : o.rate / nodes.length,
          timeoutMs: REQUEST_TIMEOUT_MS,
          seriesLatency: true,
        },
        { host: '127.0.0.1', port: n.respPort, password: undefined },
        templatesOf(o),
        new WorkloadSource(
          spec,
          'uniform',
          random,
          new KeySpace(keys, o.connections),
          SCAN_LENGTH_MAX_DEFAULT,
          ZIPFIAN_THETA_DEFAULT,
        ),
      );
    });
  }

  start(): void {
    this.runs = this.drivers.map((d) => d.run());
  }

  /** Operations completed so far, successes and failures. */
  completed(): number {
    return this.drivers.reduce((n, d) => n + d.progress().completed, 0);
  }

  async stop(): Promise<PhaseResult[]> {
    for (const d of this.drivers) d.stop();
    return Promise.all(this.runs);
  }
}

interface Window {
  ops: number;
  errors: number;
  latency: LatencyHistogram;
}

/** The drivers' series merged per second, from the earliest driver's start. */
function windows(results: PhaseResult[]): { originMs: number; windows: Window[] } {
  const originMs = Math.min(...results.map((r) => r.startedAtMs));
  const out: Window[] = [];
  const at = (i: number): Window => {
    while (out.length <= i) out.push({ ops: 0, errors: 0, latency: new LatencyHistogram() });
    return out[i];
  };
  for (const r of results) {
    const shift = Math.round((r.startedAtMs - originMs) / SERIES_INTERVAL_MS);
    r.seriesOps.forEach((n, i) => {
      at(i + shift).ops += n;
    });
    r.seriesErrors.forEach((n, i) => {
      at(i + shift).errors += n;
    });
    r.seriesLatency.forEach((h, i) => {
      at(i + shift).latency.add(h);
    });
  }
  return { originMs, windows: out };
}

// ── 1. join ───────────────────────────────────────────────────────────────────────────────────

interface CpuSample {
  atMs: number;
  cpuMs: number;
  completed: number;
}

interface JoinRun {
  keys: number;
  /** From the preload's end until anti-entropy had verified every replica's copy against the others'. */
  verifiedAfterMs: number;
  /** The handoffs' targets: those whose copy was verified against the source (no round), those that pulled it whole. */
  handoffs: { verified: number; whole: number };
  plannedMoves: number | undefined;
  joinMs: number;
  readyMs: number;
  settledMs: number;
  counters: { before: Record<string, number>; after: Record<string, number> };
  results: PhaseResult[];
  /** `settledAll` and `after`: the four nodes, d included, at the settle and at the load's end. */
  cpu: { loadStart: CpuSample; join: CpuSample; settled: CpuSample; settledAll: CpuSample; after: CpuSample };
  /** CPU ms of the joining node from its start to the table settling. */
  joinedCpuMs: number;
  /** What d holds once settled: fragments, and their keys' bytes. */
  joined: { fragments: number; bytes: number };
  /**
   * Catch-ups before serving during the join, under the load (a node the table put first for a
   * fragment catches up first): how many, the requests they held, and the longest hold of any
   * catch-up so far (`grew`: one of the join's; else the longest was at the nodes' start).
   */
  catchUps: CatchUpTotals & { grew: boolean };
}

/**
 * Catch-ups: how many, the requests they held, the longest hold; those a handover completed with no
 * round, those the handing node's handoff completed (its copy pulled here whole), those that did not
 * complete (served after a failed round, or at the deadline).
 */
interface CatchUpTotals {
  count: number;
  held: number;
  maxMs: number;
  covered: number;
  absorbed: number;
  incomplete: number;
}

/** The nodes' failover counters, summed (the longest hold: the maximum). */
async function catchUpTotals(nodes: NodeProcess[]): Promise<CatchUpTotals> {
  const failovers = await Promise.all(
    nodes.map(async (n) => (await getJson<MovesReport>(n, '/cluster/moves')).failover),
  );
  return {
    count: failovers.reduce((sum, f) => sum + f.catchUps, 0),
    held: failovers.reduce((sum, f) => sum + f.held, 0),
    maxMs: Math.max(...failovers.map((f) => f.maxMs)),
    covered: failovers.reduce((sum, f) => sum + f.covered, 0),
    absorbed: failovers.reduce((sum, f) => sum + f.absorbed, 0),
    incomplete: failovers.reduce((sum, f) => sum + f.incomplete, 0),
  };
}

/**
 * The catch-ups `nodes` logged from `logsFrom` (each node's log offset) on of the fragments member
 * `from` served first: how many, the requests they held, and the longest.
 */
function catchUpsFrom(
  nodes: NodeProcess[],
  logsFrom: number[],
  from: string,
): { count: number; held: number; maxMs: number } {
  const totals = { count: 0, held: 0, maxMs: 0 };
  nodes.forEach((n, i) => {
    for (const line of n.log.slice(logsFrom[i]).split('\n')) {
      if (!line.includes('"tookMs"')) continue;
      const entry = JSON.parse(line) as { msg: string; from?: string; tookMs: number; held: number };
      // Logged as complete ('caught up: …') or not in time ('catch-up from the other replicas …').
      if (!/^(caught up|catch-up)/.test(entry.msg) || entry.from !== from) continue;
      totals.count++;
      totals.held += entry.held;
      totals.maxMs = Math.max(totals.maxMs, entry.tookMs);
    }
  });
  return totals;
}

function cpuSample(nodes: NodeProcess[], load: ClusterLoad): CpuSample {
  return {
    atMs: Date.now(),
    cpuMs: nodes.reduce((ms, n) => ms + processCpuMs(n.child!.pid!), 0),
    completed: load.completed(),
  };
}

async function joinUnderLoad(o: Options): Promise<JoinRun> {
  const ids = nodeIds(REPLICAS);
  const cluster = await startCluster('bench-moves-join', ids, nodeArgs(o), [], launcherOf(o));
  let joined: NodeProcess | undefined;
  try {
    const [a] = cluster.nodes;
    const keys = Math.ceil((o.mibPerNode * MIB) / recordBytes(o));
    await preload(o, a, keys);
    await replicated(cluster.nodes);
    await settledAt(cluster.nodes, ids, a, CONDITION_MS_MAX);
    const verifiedAfterMs = await copiesVerified(cluster.nodes);
    const plan = await postJson<PlanAnswer>(a, '/cluster/plan', { action: 'join', node: 'd' });
    const before = await coordinatorCounters(a);
    const load = new ClusterLoad(o, cluster.nodes, keys, o.beforeMs + o.settleMsMax + o.afterMs);
    load.start();
    await sleep(WARMUP_WINDOWS * SERIES_INTERVAL_MS);
    const loadStart = cpuSample(cluster.nodes, load);
    await sleep(o.beforeMs - WARMUP_WINDOWS * SERIES_INTERVAL_MS);
    const join = cpuSample(cluster.nodes, load);
    const catchUpsBefore = await catchUpTotals(cluster.nodes);
    joined = await joiningNode(o, cluster);
    progress(`  d joins at ${((join.atMs - loadStart.atMs) / 1000).toFixed(1)} s of load`);
    await joined.start({}, launcherOf(o)('d'));
    const readyMs = Date.now();
    const running = [...cluster.nodes, joined];
    const settledMs = await settledAt(running, [...ids, 'd'], a, o.settleMsMax);
    const settled = cpuSample(cluster.nodes, load);
    const settledAll = cpuSample(running, load);
    const joinedCpuMs = processCpuMs(joined.child!.pid!);
    const placement = await getJson<FragmentPlacement[]>(a, '/cluster/placement');
    const dHolds = held(o, keys, placement, ['d']);
    const catchUpsAfter = await catchUpTotals(running);
    progress(`  settled ${((settledMs - join.atMs) / 1000).toFixed(1)} s after the join`);
    await sleep(o.afterMs);
    const after = cpuSample(running, load);
    const results = await load.stop();
    if (o.keepLogs) progress(`  node logs kept in ${await keepLogs('bench-moves-join', running)}`);
    const loggedTimes = (msg: string) =>
      running.reduce((n, node) => n + node.log.split(`"msg":"${msg}"`).length - 1, 0);
    return {
      keys,
      verifiedAfterMs,
      handoffs: {
        verified: loggedTimes('a copy handed over was verified against it already: no round'),
        whole: loggedTimes('pulled a copy handed over whole'),
      },
      plannedMoves: plan.replicaMoves,
      joinMs: join.atMs,
      readyMs,
      settledMs,
      counters: { before, after: await coordinatorCounters(a) },
      results,
      cpu: { loadStart, join, settled, settledAll, after },
      joinedCpuMs,
      joined: { fragments: dHolds.fragments[0], bytes: dHolds.bytes[0] },
      catchUps: {
        count: catchUpsAfter.count - catchUpsBefore.count,
        held: catchUpsAfter.held - catchUpsBefore.held,
        maxMs: catchUpsAfter.maxMs,
        grew: catchUpsAfter.maxMs > catchUpsBefore.maxMs,
        covered: catchUpsAfter.covered - catchUpsBefore.covered,
        absorbed: catchUpsAfter.absorbed - catchUpsBefore.absorbed,
        incomplete: catchUpsAfter.incomplete - catchUpsBefore.incomplete,
      },
    };
  } catch (err) {
    progress(
      `  node logs kept in ${await keepLogs('bench-moves-join', [...cluster.nodes, ...(joined === undefined ? [] : [joined])])}`,
    );
    throw err;
  } finally {
    await joined?.stop('SIGKILL');
    await cluster.stop();
  }
}

/** Node d, joining through a, in the cluster's temp directory. */
async function joiningNode(o: Options, cluster: ClusterFixture): Promise<NodeProcess> {
  const [respPort, peerPort] = await freePorts(2);
  const a = cluster.nodes[0];
  return new NodeProcess('d', respPort, peerPort, a.dataDir.replace(/\/a$/, '/d'), [
    '--peer-port',
    String(peerPort),
    '--log-level',
    'info',
    ...nodeArgs(o),
    '--join',
    `127.0.0.1:${a.peerPort}`,
  ]);
}

// ── 2. down ───────────────────────────────────────────────────────────────────────────────────

interface DownRun {
  keys: number;
  /** Catch-ups before serving at the survivors (failover-catch-up.ts), and the longest hold. */
  catchUps: number;
  catchUpMsMax: number;
  /** The survivors' catch-ups of the fragments the victim served first (their logs, from the kill). */
  failoverCatchUps: { count: number; held: number; maxMs: number };
  /** Per node, in order, before the kill: fragments it held a replica of, and their bytes. */
  held: { fragments: number[]; bytes: number[] };
  victim: string;
  killMs: number;
  downMs: number | undefined;
  underFirstMs: number | undefined;
  restoredMs: number;
  settledMs: number;
  antiEntropyBytes: number;
  /** The survivors' CPU (every thread of each) from the first poll that saw Down to the one that saw none short. */
  restoreCpuMs: number;
  /** Every node's CPU over --idle-watch before the kill, settled and without load: what keeping the copies costs. */
  idleCpuMs: number;
  counters: { before: Record<string, number>; after: Record<string, number> };
}

/** Per node of `ids`: the fragments it holds a replica of, and their keys' bytes (key and value). */
function held(
  o: Options,
  keys: number,
  placement: FragmentPlacement[],
  ids: string[],
): { fragments: number[]; bytes: number[] } {
  const keyspace = new Keyspace(o.fragments);
  const templates = templatesOf(o);
  const keysOf = new Array<number>(o.fragments).fill(0);
  for (let i = 0; i < keys; i++) keysOf[keyspace.fragmentOf(Buffer.from(templates.key(i)))]++;
  const holds = (id: string) => placement.filter((f) => f.replicas.includes(id));
  return {
    fragments: ids.map((id) => holds(id).length),
    bytes: ids.map((id) => holds(id).reduce((n, f) => n + keysOf[f.fragment] * recordBytes(o), 0)),
  };
}

/** Anti-entropy bytes `nodes` have sent their peers, in all (INFO replication's peer lines). */
async function antiEntropyBytesSent(nodes: NodeProcess[]): Promise<number> {
  let bytes = 0;
  for (const n of nodes) {
    for (const [field, value] of await infoOf(n, 'replication')) {
      if (!field.startsWith('peer_')) continue;
      bytes += Number(/anti_entropy_bytes_sent=(\d+)/.exec(value)?.[1] ?? 0);
    }
  }
  return bytes;
}

async function downToReplicas(o: Options): Promise<DownRun> {
  const ids = nodeIds(REPLICAS + 1);
  const cluster = await startCluster('bench-moves-down', ids, nodeArgs(o), [], launcherOf(o));
  try {
    const [a] = cluster.nodes;
    const victim = cluster.nodes[ids.length - 1];
    const survivors = cluster.nodes.filter((n) => n !== victim);
    const keys = Math.ceil((o.mibPerNode * MIB * ids.length) / REPLICAS / recordBytes(o));
    await preload(o, a, keys);
    await replicated(cluster.nodes);
    await settledAt(cluster.nodes, ids, a, CONDITION_MS_MAX);
    const heldBefore = held(o, keys, await getJson<FragmentPlacement[]>(a, '/cluster/placement'), ids);
    const before = await coordinatorCounters(a);
    const aeBefore = await antiEntropyBytesSent(survivors);
    const logFrom = a.log.length;
    const logsFrom = survivors.map((n) => n.log.length);
    const clusterCpuMs = () => cluster.nodes.reduce((ms, n) => ms + processCpuMs(n.child!.pid!), 0);
    const idleFromCpuMs = clusterCpuMs();
    await sleep(o.idleWatchMs);
    const idleCpuMs = clusterCpuMs() - idleFromCpuMs;
    const killMs = Date.now();
    await victim.stop('SIGKILL');
    progress(`  ${victim.id} killed`);
    let underFirstMs: number | undefined;
    let restoredMs: number | undefined;
    const survivorsCpuMs = () => survivors.reduce((ms, n) => ms + processCpuMs(n.child!.pid!), 0);
    let cpuAtDownMs: number | undefined;
    let cpuAtRestoredMs = 0;
    const giveUpMs = killMs + o.downAfterMs + CONDITION_MS_MAX;
    while (restoredMs === undefined) {
      if (Date.now() > giveUpMs) throw new Error('fragments still under-replicated at the deadline');
      const down = memberEventTime(a, logFrom, 'MemberDown', victim.id) !== undefined;
      if (down) cpuAtDownMs ??= survivorsCpuMs();
      const under = (await getJson<MovesReport>(a, '/cluster/moves')).underReplicated;
      if (under > 0) underFirstMs ??= Date.now();
      if (down && under === 0 && underFirstMs !== undefined) {
        restoredMs = Date.now();
        cpuAtRestoredMs = survivorsCpuMs();
      } else await sleep(POLL_INTERVAL_MS);
    }
    progress(`  no fragment under-replicated ${((restoredMs - killMs) / 1000).toFixed(1)} s after the kill`);
    const settledMs = await settledAt(survivors, ids.slice(0, -1), a, CONDITION_MS_MAX);
    const catchUps = await catchUpTotals(survivors);
    if (o.keepLogs) progress(`  node logs kept in ${await keepLogs('bench-moves-down', cluster.nodes)}`);
    return {
      catchUps: catchUps.count,
      catchUpMsMax: catchUps.maxMs,
      failoverCatchUps: catchUpsFrom(survivors, logsFrom, victim.id),
      keys,
      held: heldBefore,
      victim: victim.id,
      killMs,
      downMs: memberEventTime(a, logFrom, 'MemberDown', victim.id),
      underFirstMs,
      restoredMs,
      settledMs,
      antiEntropyBytes: (await antiEntropyBytesSent(survivors)) - aeBefore,
      restoreCpuMs: cpuAtRestoredMs - (cpuAtDownMs ?? cpuAtRestoredMs),
      idleCpuMs,
      counters: { before, after: await coordinatorCounters(a) },
    };
  } catch (err) {
    progress(`  node logs kept in ${await keepLogs('bench-moves-down', cluster.nodes)}`);
    throw err;
  } finally {
    await cluster.stop();
  }
}

// ── Report ────────────────────────────────────────────────────────────────────────────────────

const fixed = (x: number, digits = 1) => x.toFixed(digits);
const ms = (us: number) => fixed(us / 1000, 2);
const mean = (xs: number[]) => xs.reduce((x, y) => x + y, 0) / xs.length;
const delta = (c: JoinRun['counters'], name: string) => (c.after[name] ?? 0) - (c.before[name] ?? 0);

function joinReport(o: Options, run: JoinRun): string[] {
  const { originMs, windows: all } = windows(run.results);
  // The last window is cut short by the end of the load.
  const whole = all.slice(0, -1);
  const secondOf = (wallMs: number) => (wallMs - originMs) / SERIES_INTERVAL_MS;
  const joinAt = secondOf(run.joinMs);
  const settleAt = secondOf(run.settledMs);
  const phaseOf = (i: number) => (i + 1 <= joinAt ? 'before' : i < settleAt ? 'join' : 'after');
  const before = whole.filter((_, i) => i >= WARMUP_WINDOWS && phaseOf(i) === 'before');
  const during = whole.filter((_, i) => phaseOf(i) === 'join');
  const afterwards = whole.filter((_, i) => phaseOf(i) === 'after');
  const beforeLatency = new LatencyHistogram();
  for (const w of before) beforeLatency.add(w.latency);
  const meanBefore = mean(before.map((w) => w.ops));
  const worst = Math.min(...during.map((w) => w.ops));
  // The level a 1-second window's p99 keeps before the join: the median window, which one spike
  // in the before phase (a window after the warm-up) does not move, as it moves the pooled p99.
  const p99Before = median(before.map((w) => w.latency.percentileUs(99)));
  const p99BeforePooled = beforeLatency.percentileUs(99);
  const p99Worst = Math.max(...during.map((w) => w.latency.percentileUs(99)));
  const errors = new Map<string, number>();
  const samples = new Map<string, string>();
  for (const r of run.results)
    for (const [kind, e] of r.errors) {
      errors.set(kind, (errors.get(kind) ?? 0) + e.count);
      samples.set(kind, e.sample);
    }
  const optimum = (REPLICAS * o.fragments) / (REPLICAS + 1);
  const { loadStart, join, settled, settledAll, after } = run.cpu;
  const cpuBefore = (join.cpuMs - loadStart.cpuMs) / (join.completed - loadStart.completed);
  const cpuJoin = (settled.cpuMs - join.cpuMs + run.joinedCpuMs) / (settled.completed - join.completed);
  const cpuAfter = (after.cpuMs - settledAll.cpuMs) / (after.completed - settledAll.completed);
  const meanAfter = afterwards.length === 0 ? undefined : mean(afterwards.map((w) => w.ops));
  const load =
    o.rate === undefined
      ? `closed loop, ${o.connections} connections per node`
      : `open loop at ${o.rate} ops/s`;
  return [
    `Join: 3 nodes (R=3, ${o.fragments} fragments, ${o.store}, ${o.workers} worker each), ${run.keys} keys of ` +
      `${o.valueBytes} B (${fixed((run.keys * recordBytes(o)) / MIB)} MiB per node); GET ${o.readRatio * 100} % / SET through a, b and c, ${load}; d joins.`,
    '',
    '| second | phase | ops/s | p99 ms | errors |',
    '|--:|---|--:|--:|--:|',
    ...whole.map(
      (w, i) =>
        `| ${i} | ${i < WARMUP_WINDOWS ? 'warm-up' : phaseOf(i)} | ${w.ops} | ${ms(w.latency.percentileUs(99))} | ${w.errors} |`,
    ),
    '',
    `Before the join: ${fixed(meanBefore, 0)} ops/s (mean of ${before.length} windows), p99 ${ms(p99Before)} ms ` +
      `(the median window's; ${ms(p99BeforePooled)} ms over all their requests).`,
    `Join to settled (${during.length} windows): worst ${worst} ops/s, dip ${fixed(100 * (1 - worst / meanBefore))} % ` +
      `(mean ${fixed(mean(during.map((w) => w.ops)), 0)} ops/s, ${fixed(mean(during.map((w) => w.ops)) / meanBefore, 2)}×); ` +
      `worst p99 ${ms(p99Worst)} ms, ${fixed(p99Worst / p99Before, 2)}× before.`,
    // Four nodes serve the load after the join: on shared cores its level, not the one before, is
    // what the join's windows can come back to.
    `After settling (${afterwards.length} windows): ${meanAfter === undefined ? '–' : `${fixed(meanAfter, 0)} ops/s (${fixed(meanAfter / meanBefore, 2)}× before)`}, ` +
      `CPU per operation ${fixed(cpuAfter * 1000, 0)} µs (${fixed(cpuAfter / cpuBefore, 2)}× before; four nodes, d serving first and forwarded to).`,
    `Time: d ready ${fixed((run.readyMs - run.joinMs) / 1000)} s after its start, table settled ${fixed((run.settledMs - run.joinMs) / 1000)} s after it.`,
    `d holds ${run.joined.fragments} replicas (${fixed(run.joined.bytes / MIB)} MiB), copied at ` +
      `${fixed(run.joined.bytes / MIB / ((run.settledMs - run.readyMs) / 1000), 2)} MiB/s from ready to settled.`,
    `Replica moves: ${delta(run.counters, 'movesStarted')} started, ${delta(run.counters, 'movesFinished')} finished, ` +
      `${delta(run.counters, 'movesCancelled')} cancelled; the planner's preview before the join ${run.plannedMoves ?? '–'}; ` +
      `optimum R·F/(N+1) = ${fixed(optimum)}.`,
    `CPU per operation (every thread of every node, /proc; d's from its start): before ${fixed(cpuBefore * 1000, 0)} µs, ` +
      `join to settled ${fixed(cpuJoin * 1000, 0)} µs (${fixed(cpuJoin / cpuBefore, 2)}×); d used ${fixed(run.joinedCpuMs / 1000, 1)} s of CPU.`,
    `Handoffs: ${run.handoffs.verified} of ${run.handoffs.verified + run.handoffs.whole} targets' copies verified ` +
      `against the source, no round; ${run.handoffs.whole} pulled the copy whole (anti-entropy had verified every copy ` +
      `${fixed(run.verifiedAfterMs / 1000)} s after the preload, before the load began).`,
    `Catch-up before serving, under the load (a node the table put first catches up first): ${run.catchUps.count} ` +
      `catch-ups holding ${run.catchUps.held} requests (${run.catchUps.covered} completed by the handover, no round; ` +
      `${run.catchUps.absorbed} by the handing node's handoff; ${run.catchUps.incomplete} incomplete), the longest ` +
      `${run.catchUps.grew ? `${run.catchUps.maxMs} ms` : `under ${run.catchUps.maxMs} ms (the longest, at the nodes' start)`} (goal ≤ 1 s).`,
    `Client errors: ${errors.size === 0 ? 'none' : [...errors].map(([k, n]) => `${k} ×${n} ("${samples.get(k)}")`).join(', ')}.`,
  ];
}

function downReport(o: Options, run: DownRun): string[] {
  const ids = nodeIds(REPLICAS + 1);
  const { bytes, fragments } = run.held;
  const victimBytes = bytes[bytes.length - 1];
  const restoreS = run.downMs === undefined ? undefined : (run.restoredMs - run.downMs) / 1000;
  const rate = restoreS === undefined ? undefined : victimBytes / restoreS;
  const s = (atMs: number | undefined) => (atMs === undefined ? '–' : fixed((atMs - run.killMs) / 1000));
  return [
    `Down: 4 nodes (R=3, ${o.fragments} fragments, ${o.store}, ${o.workers} worker each, --down-after ${o.downAfterMs} ms), ` +
      `${run.keys} keys of ${o.valueBytes} B; ${run.victim} SIGKILLed, no client load.`,
    '',
    `Held before the kill (fragments, their keys × ${recordBytes(o)} B): ` +
      `${ids.map((id, i) => `${id} ${fragments[i]} (${fixed(bytes[i] / MIB)} MiB)`).join(', ')}.`,
    `Before the kill, settled and without load: the ${ids.length} nodes used ` +
      `${fixed(run.idleCpuMs / o.idleWatchMs, 2)} cores (every thread, over ${fixed(o.idleWatchMs / 1000)} s).`,
    `From the kill: Down at a ${s(run.downMs)} s, first under-replicated ${s(run.underFirstMs)} s, none under-replicated ` +
      `${s(run.restoredMs)} s, settled ${s(run.settledMs)} s.`,
    `Down to none under-replicated: ${restoreS === undefined ? '–' : fixed(restoreS)} s for ${fixed(victimBytes / MIB)} MiB: ` +
      `${rate === undefined ? '–' : fixed(rate / MIB, 2)} MiB/s; anti-entropy sent ${fixed(run.antiEntropyBytes / MIB)} MiB.`,
    `The survivors' CPU from Down to none under-replicated (every thread, polled): ${fixed(run.restoreCpuMs / 1000, 2)} s, ` +
      `${fixed(run.restoreCpuMs / (victimBytes / MIB), 0)} ms per MiB copied.`,
    `Projection to 1 GiB per node at that rate (not measured): ${rate === undefined ? '–' : fixed(GIB / rate, 0)} s from Down.`,
    `Catch-up before serving after the kill (the fragments ${run.victim} served first; no client load): ` +
      `${run.failoverCatchUps.count} at the survivors, holding ${run.failoverCatchUps.held} requests, the longest ` +
      `${run.failoverCatchUps.maxMs} ms (goal ≤ 1 s). With those at the nodes' start: ${run.catchUps}, the longest ` +
      `${run.catchUpMsMax} ms.`,
    `Replica moves: ${delta(run.counters, 'movesStarted')} started, ${delta(run.counters, 'movesFinished')} finished ` +
      `(the victim held ${fragments[fragments.length - 1]} replicas: the optimum is one move each).`,
  ];
}

async function main(): Promise<void> {
  const o = parseOptions(process.argv.slice(2));
  const out: string[] = [];
  if (o.parts.has('join')) {
    progress('join: 3 nodes, d joins under load');
    out.push(...joinReport(o, await joinUnderLoad(o)), '');
  }
  if (o.parts.has('down')) {
    progress('down: 4 nodes, one killed');
    out.push(...downReport(o, await downToReplicas(o)));
  }
  process.stdout.write(`${out.join('\n')}\n`);
}

main().catch((err: unknown) => {
  process.stderr.write(`moves: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exitCode = 1;
});
