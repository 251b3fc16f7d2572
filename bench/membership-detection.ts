// Failure detection on real processes on loopback (not a test: run it by hand, read the figures).
//
//   npm run build:test && node .build/bench/membership-detection.js [flags]
//
//   1. detection: --nodes processes under a steady write load through node a (--rate SETs a second,
//      one connection); each of --rounds rounds SIGKILLs another node (b, c, … in turn) at a seeded
//      random moment of the probe rounds, and reads from every survivor's log when it logged the
//      victim MemberUnreachable and MemberDown; the victim restarts and rejoins before the next round.
//      Printed: per round and survivor, ms from the kill to each (goal: unreachable ≤ 5 s at p99).
//   2. false Downs: a fresh cluster under the same load; the last node is paused (SIGSTOP, SIGCONT
//      --pause later) every --pause-every for --duration, the first pause half an interval in.
//      Printed: MemberDown lines in every node's log (goal 0), MemberUnreachable lines, the paused
//      node's stalls, and failed writes.
//   3. idle cost: --nodes processes idle for --idle (no anti-entropy rounds): each main thread's CPU
//      per second from /proc/<pid>/task/<pid>/stat, beside one node without peers; and --nodes
//      embedded nodes in this process, whose membership drivers count what they send (datagrams,
//      their bytes, envelopes on peer connections) and their main-thread time in the core and codecs.
//
// Flags: --nodes N (3), --rounds R (5), --down-after D (5s), --rate SET/s (1000), --pause D (1.5s),
// --pause-every D (60s), --duration D (2m), --idle D (20s), --parts detection,false-down,idle (all),
// --seed S (1). Durations as the node takes them: 250ms, 2s, 5m. Progress goes to stderr, the
// figures to stdout.

import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import type { Redis } from 'ioredis';
import { parseDuration } from '../src/main/cli-args.js';
import { Tessera } from '../src/main/node.js';
import {
  CLUSTER_SECRET,
  type ClusterFixture,
  memberEvents,
  memberEventTime,
  NodeProcess,
  startCluster,
} from '../test/integration/cluster-helpers.js';
import { eventually, sleep, tempDir } from '../test/integration/helpers.js';
import { Random } from './load/random.js';
import { freePorts } from './ports.js';

/** The kill comes at a random moment of this span: a round of probes among three nodes (two peers each). */
const KILL_PHASE_MS = 2_000;
/** How long a survivor may take to log a victim Down, beyond --down-after, before it counts as missing. */
const DETECTION_DEADLINE_MS = 60_000;
/** How long a restarted node may take to rejoin, or a cluster to form. */
const REJOIN_DEADLINE_MS = 60_000;
/** Before an idle measurement: the connect-time anti-entropy rounds and first gossip are over. */
const IDLE_SETTLE_MS = 5_000;
/** The steady load's batches: --rate / (1000 / LOAD_TICK_MS) SETs each. */
const LOAD_TICK_MS = 10;
/** Keys the steady load writes over. */
const LOAD_KEYS = 10_000;
/** Linux's USER_HZ: /proc's CPU times are in ticks of 10 ms. */
const PROC_TICK_MS = 10;
const FRAGMENTS = 16;

interface Options {
  nodes: number;
  rounds: number;
  downAfterMs: number;
  rate: number;
  pauseMs: number;
  pauseEveryMs: number;
  durationMs: number;
  idleMs: number;
  parts: Set<string>;
  seed: number;
}

function parseOptions(argv: string[]): Options {
  const { values } = parseArgs({
    args: argv,
    options: {
      nodes: { type: 'string', default: '3' },
      rounds: { type: 'string', default: '5' },
      'down-after': { type: 'string', default: '5s' },
      rate: { type: 'string', default: '1000' },
      pause: { type: 'string', default: '1500ms' },
      'pause-every': { type: 'string', default: '60s' },
      duration: { type: 'string', default: '2m' },
      idle: { type: 'string', default: '20s' },
      parts: { type: 'string', default: 'detection,false-down,idle' },
      seed: { type: 'string', default: '1' },
    },
  });
  const options: Options = {
    nodes: Number(values.nodes),
    rounds: Number(values.rounds),
    downAfterMs: parseDuration(values['down-after']),
    rate: Number(values.rate),
    pauseMs: parseDuration(values.pause),
    pauseEveryMs: parseDuration(values['pause-every']),
    durationMs: parseDuration(values.duration),
    idleMs: parseDuration(values.idle),
    parts: new Set(values.parts.split(',')),
    seed: Number(values.seed),
  };
  if (!Number.isInteger(options.nodes) || options.nodes < 3 || options.nodes > 26)
    throw new Error(`--nodes must be 3..26, got ${values.nodes}`);
  if (!Number.isInteger(options.rounds) || options.rounds < 1) throw new Error('--rounds must be 1 or more');
  if (!(options.rate > 0)) throw new Error('--rate must be positive');
  return options;
}

const progress = (line: string) => process.stderr.write(`${line}\n`);
const nodeIds = (n: number) => Array.from({ length: n }, (_, i) => String.fromCharCode(97 + i));

/** Flags of every node of a run, after startCluster's: one worker each (the nodes share the machine). */
const nodeArgs = (o: Options, extra: string[] = []) => [
  '--workers',
  '1',
  '--down-after',
  `${o.downAfterMs}ms`,
  ...extra,
];

/**
 * SETs at a steady rate through one connection, a batch every LOAD_TICK_MS; while a whole second of
 * them is unanswered (a node stalled) the batches are skipped rather than piled up.
 */
class SteadyWrites {
  ok = 0;
  failed = 0;
  skipped = 0;
  private inFlight = 0;
  private seq = 0;
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly redis: Redis,
    private readonly rate: number,
  ) {
    this.timer = setInterval(() => this.tick(), LOAD_TICK_MS);
  }

  private tick(): void {
    const batch = Math.max(1, Math.round((this.rate * LOAD_TICK_MS) / 1000));
    if (this.inFlight >= this.rate) {
      this.skipped += batch;
      return;
    }
    for (let i = 0; i < batch; i++) {
      const seq = this.seq++;
      this.inFlight++;
      this.redis.set(`steady:${seq % LOAD_KEYS}`, `v${seq}`).then(
        () => {
          this.ok++;
          this.inFlight--;
        },
        () => {
          this.failed++;
          this.inFlight--;
        },
      );
    }
  }

  /** Stops sending and waits for what is in flight. */
  async stop(): Promise<void> {
    clearInterval(this.timer);
    await eventually(() => this.inFlight === 0, DETECTION_DEADLINE_MS);
  }
}

interface DetectionSample {
  round: number;
  victim: string;
  survivor: string;
  /** ms from the kill to the survivor's MemberUnreachable / MemberDown line; undefined: none logged. */
  unreachableMs: number | undefined;
  downMs: number | undefined;
}

async function detection(o: Options): Promise<{ samples: DetectionSample[]; writes: SteadyWrites }> {
  const cluster = await startCluster('bench-detect', nodeIds(o.nodes), nodeArgs(o));
  const random = new Random(o.seed);
  const samples: DetectionSample[] = [];
  try {
    const writes = new SteadyWrites(await cluster.nodes[0].client(), o.rate);
    for (let round = 1; round <= o.rounds; round++) {
      const victim = cluster.nodes[1 + ((round - 1) % (o.nodes - 1))];
      const survivors = cluster.nodes.filter((n) => n !== victim);
      await sleep(random.next() * KILL_PHASE_MS);
      const from = survivors.map((n) => n.log.length);
      const killedMs = Date.now();
      await victim.stop('SIGKILL');
      // A survivor that never logs it is a sample missing, not the end of the run.
      await eventually(
        () => survivors.every((n, i) => memberEventTime(n, from[i], 'MemberDown', victim.id) !== undefined),
        o.downAfterMs + DETECTION_DEADLINE_MS,
      ).catch(() => {});
      for (const [i, survivor] of survivors.entries()) {
        const unreachable = memberEventTime(survivor, from[i], 'MemberUnreachable', victim.id);
        const down = memberEventTime(survivor, from[i], 'MemberDown', victim.id);
        samples.push({
          round,
          victim: victim.id,
          survivor: survivor.id,
          unreachableMs: unreachable === undefined ? undefined : unreachable - killedMs,
          downMs: down === undefined ? undefined : down - killedMs,
        });
      }
      progress(
        `round ${round}: ${victim.id} killed; ${samples
          .slice(-survivors.length)
          .map((s) => `${s.survivor} ${s.unreachableMs ?? '–'}/${s.downMs ?? '–'} ms`)
          .join(', ')}`,
      );
      const rejoinFrom = survivors.map((n) => n.log.length);
      await victim.start();
      await cluster.connected();
      await eventually(
        () =>
          survivors.every(
            (n, i) => memberEventTime(n, rejoinFrom[i], 'MemberRejoined', victim.id) !== undefined,
          ),
        REJOIN_DEADLINE_MS,
      );
    }
    await writes.stop();
    return { samples, writes };
  } finally {
    await cluster.stop();
  }
}

interface FalseDownRun {
  pauses: number;
  downs: number;
  unreachable: number;
  stalls: number;
  writes: SteadyWrites;
}

async function falseDowns(o: Options): Promise<FalseDownRun> {
  const cluster = await startCluster('bench-false-down', nodeIds(o.nodes), nodeArgs(o));
  try {
    const paused = cluster.nodes[o.nodes - 1];
    const from = cluster.nodes.map((n) => n.log.length);
    const writes = new SteadyWrites(await cluster.nodes[0].client(), o.rate);
    const startedMs = Date.now();
    let pauses = 0;
    for (let atMs = startedMs + o.pauseEveryMs / 2; atMs < startedMs + o.durationMs; atMs += o.pauseEveryMs) {
      await sleep(atMs - Date.now());
      paused.child!.kill('SIGSTOP');
      await sleep(o.pauseMs);
      paused.child!.kill('SIGCONT');
      pauses++;
      progress(`pause ${pauses} of ${paused.id} at ${Math.round((atMs - startedMs) / 1000)} s`);
    }
    await sleep(startedMs + o.durationMs - Date.now());
    await writes.stop();
    const events = cluster.nodes.flatMap((n, i) => memberEvents(n, from[i]));
    return {
      pauses,
      downs: events.filter((e) => e.event === 'MemberDown').length,
      unreachable: events.filter((e) => e.event === 'MemberUnreachable').length,
      stalls: paused.log.slice(from[o.nodes - 1]).split('membership loop stalled').length - 1,
      writes,
    };
  } finally {
    await cluster.stop();
  }
}

/** CPU time of a process's main thread (its first thread, whose id is the pid), in ms. */
function mainThreadCpuMs(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/task/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  // utime and stime: fields 14 and 15 of the whole line.
  return (Number(fields[11]) + Number(fields[12])) * PROC_TICK_MS;
}

/** Each running node's main-thread CPU ms per second over `idleMs`, after IDLE_SETTLE_MS. */
async function idleCpu(nodes: NodeProcess[], idleMs: number): Promise<number[]> {
  await sleep(IDLE_SETTLE_MS);
  const before = nodes.map((n) => mainThreadCpuMs(n.child!.pid!));
  await sleep(idleMs);
  return nodes.map((n, i) => ((mainThreadCpuMs(n.child!.pid!) - before[i]) * 1000) / idleMs);
}

interface IdleCost {
  clusterCpuMsPerSec: number[];
  singleCpuMsPerSec: number;
  /** Per embedded node, per second. */
  traffic: Array<{
    datagrams: number;
    datagramBytes: number;
    envelopes: number;
    envelopeBytes: number;
    busyMs: number;
  }>;
}

async function idle(o: Options): Promise<IdleCost> {
  const quiet = ['--anti-entropy-interval', '1h'];
  let cluster: ClusterFixture | undefined = await startCluster(
    'bench-idle',
    nodeIds(o.nodes),
    nodeArgs(o, quiet),
  );
  let clusterCpuMsPerSec: number[];
  try {
    clusterCpuMsPerSec = await idleCpu(cluster.nodes, o.idleMs);
  } finally {
    await cluster.stop();
    cluster = undefined;
  }
  const singleDir = await tempDir('bench-idle-single');
  const [respPort] = await freePorts(1);
  const single = new NodeProcess('single', respPort, 0, `${singleDir.path}/single`, [
    '--workers',
    '1',
    '--fragments',
    String(FRAGMENTS),
    '--log-level',
    'info',
  ]);
  let singleCpuMsPerSec: number;
  try {
    await single.start();
    [singleCpuMsPerSec] = await idleCpu([single], o.idleMs);
  } finally {
    await single.stop('SIGKILL');
    await singleDir.cleanup();
  }
  return { clusterCpuMsPerSec, singleCpuMsPerSec, traffic: await embeddedTraffic(o) };
}

/** What the membership drivers of `--nodes` embedded nodes send, per node per second, idle. */
async function embeddedTraffic(o: Options): Promise<IdleCost['traffic']> {
  const dir = await tempDir('bench-idle-embedded');
  const ids = nodeIds(o.nodes);
  const ports = await freePorts(ids.length);
  const peers = ids.map((id, i) => `${id}@127.0.0.1:${ports[i]}`).join(',');
  const nodes: Tessera[] = [];
  try {
    for (const id of ids) {
      nodes.push(
        await Tessera.start({
          nodeId: id,
          dataDir: `${dir.path}/${id}`,
          store: 'memory',
          peers,
          clusterSecret: CLUSTER_SECRET,
          fragments: FRAGMENTS,
          workers: 1,
          downAfterMs: o.downAfterMs,
          antiEntropyIntervalMs: 3_600_000,
        }),
      );
    }
    await eventually(
      () =>
        nodes.every((n) => {
          const view = n.cluster!.membership!.view();
          return view.length === ids.length && view.every((m) => m.state === 'Up' && !m.unreachable);
        }),
      REJOIN_DEADLINE_MS,
    );
    await sleep(IDLE_SETTLE_MS);
    const before = nodes.map((n) => ({ ...n.cluster!.membership!.traffic }));
    await sleep(o.idleMs);
    const perSec = (x: number) => (x * 1000) / o.idleMs;
    return nodes.map((n, i) => {
      const t = n.cluster!.membership!.traffic;
      const b = before[i];
      return {
        datagrams: perSec(t.datagramsSent - b.datagramsSent),
        datagramBytes: perSec(t.datagramBytesSent - b.datagramBytesSent),
        envelopes: perSec(t.envelopesSent - b.envelopesSent),
        envelopeBytes: perSec(t.envelopeBytesSent - b.envelopeBytesSent),
        busyMs: perSec(t.busyMs - b.busyMs),
      };
    });
  } finally {
    for (const n of nodes) await n.close();
    await dir.cleanup();
  }
}

/** The value at rank ⌈q·n⌉ of the sorted `xs` (nearest rank). */
function quantile(xs: number[], q: number): number {
  const sorted = [...xs].sort((x, y) => x - y);
  return sorted[Math.max(0, Math.ceil(q * sorted.length) - 1)];
}

function summary(label: string, xs: Array<number | undefined>): string {
  const seen = xs.filter((x): x is number => x !== undefined);
  const missing = xs.length - seen.length;
  if (seen.length === 0) return `| ${label} | – | – | – | – | ${missing} |`;
  const stats = [0.5, 0.99, 1].map((q) => quantile(seen, q));
  return `| ${label} | ${seen.length} | ${stats.join(' | ')} | ${missing} |`;
}

const fixed = (x: number, digits = 1) => x.toFixed(digits);

async function main(): Promise<void> {
  const o = parseOptions(process.argv.slice(2));
  progress(
    `membership-detection: ${o.nodes} nodes, --down-after ${o.downAfterMs} ms, ${o.rate} SET/s through a`,
  );
  const out: string[] = [];
  if (o.parts.has('detection')) {
    const { samples, writes } = await detection(o);
    out.push(
      `Detection: ${o.rounds} rounds, ${o.nodes} nodes, --down-after ${o.downAfterMs} ms; ms from the SIGKILL to each survivor's line:`,
      '',
      '| round | victim | survivor | unreachable | Down |',
      '|--:|---|---|--:|--:|',
      ...samples.map(
        (s) =>
          `| ${s.round} | ${s.victim} | ${s.survivor} | ${s.unreachableMs ?? '–'} | ${s.downMs ?? '–'} |`,
      ),
      '',
      '| from the kill to | samples | p50 ms | p99 ms | max ms | never logged |',
      '|---|--:|--:|--:|--:|--:|',
      summary(
        'MemberUnreachable',
        samples.map((s) => s.unreachableMs),
      ),
      summary(
        'MemberDown',
        samples.map((s) => s.downMs),
      ),
      summary(
        'Down after unreachable',
        samples.map((s) =>
          s.downMs === undefined || s.unreachableMs === undefined ? undefined : s.downMs - s.unreachableMs,
        ),
      ),
      '',
      `Steady writes through a: ${writes.ok} acknowledged, ${writes.failed} failed, ${writes.skipped} skipped while a second's worth waited.`,
    );
  }
  if (o.parts.has('false-down')) {
    const run = await falseDowns(o);
    out.push(
      '',
      `False Downs: ${run.pauses} pauses of ${o.pauseMs} ms, one every ${o.pauseEveryMs / 1000} s over ${o.durationMs / 1000} s, ` +
        `${o.nodes} nodes, --down-after ${o.downAfterMs} ms: ${run.downs} MemberDown lines, ` +
        `${run.unreachable} MemberUnreachable lines (all nodes), ${run.stalls} stalls logged by the paused node; ` +
        `writes through a: ${run.writes.ok} acknowledged, ${run.writes.failed} failed, ${run.writes.skipped} skipped.`,
    );
  }
  if (o.parts.has('idle')) {
    const cost = await idle(o);
    const mean = (xs: number[]) => xs.reduce((x, y) => x + y, 0) / xs.length;
    out.push(
      '',
      `Idle, ${o.idleMs / 1000} s: main-thread CPU per node ${cost.clusterCpuMsPerSec.map((x) => fixed(x)).join(' / ')} ms/s ` +
        `in a ${o.nodes}-node cluster, ${fixed(cost.singleCpuMsPerSec)} ms/s for a node without peers.`,
      `Membership drivers of ${o.nodes} embedded nodes, per node per second (mean; per node):`,
      '',
      '| datagrams | datagram bytes | envelopes | envelope bytes | core and codec ms |',
      '|--:|--:|--:|--:|--:|',
      `| ${fixed(mean(cost.traffic.map((t) => t.datagrams)))} | ${Math.round(mean(cost.traffic.map((t) => t.datagramBytes)))} | ` +
        `${fixed(mean(cost.traffic.map((t) => t.envelopes)), 2)} | ${Math.round(mean(cost.traffic.map((t) => t.envelopeBytes)))} | ` +
        `${fixed(mean(cost.traffic.map((t) => t.busyMs)), 3)} |`,
      '',
      cost.traffic
        .map(
          (t, i) =>
            `${nodeIds(o.nodes)[i]}: ${fixed(t.datagrams)} datagrams (${Math.round(t.datagramBytes)} B), ${fixed(t.busyMs, 3)} ms`,
        )
        .join('; '),
    );
  }
  process.stdout.write(`${out.join('\n')}\n`);
}

main().catch((err: unknown) => {
  process.stderr.write(
    `membership-detection: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`,
  );
  process.exitCode = 1;
});
