// Cluster benchmarks (`npm run bench:cluster`): real `tessera` processes on loopback, driven by the
// load harness. Everything is a ratio or a count measured in one run on one machine:
//
//   1. replicated write throughput at R=2 and R=3 as a ratio of a single node's: with clients that
//      route by slot (`redis-benchmark --cluster`, as cluster-mode clients do), and with every client
//      on node a, which forwards what the other nodes serve (the load harness, closed loop);
//   2. replication lag under steady load: a 3-node cluster at half its own peak (open loop), the
//      age of the oldest unacknowledged replicated write, sampled every 100 ms on every node;
//   3. anti-entropy repair: 2 nodes hold BENCH_AE_KEYS keys; 1 % of them change on one node while
//      the other is down and the first restarts (so no sender backlog remembers them); time until
//      the other holds every change, and anti-entropy bytes sent as a multiple of the changed data.
//
// Environment: BENCH_CLUSTER_SECONDS (per harness run, default 10), BENCH_CLUSTER_N (requests per
// measured redis-benchmark run, default 600000; each setup first gets an unmeasured warm-up run of
// BENCH_CLUSTER_WARMUP_N, default 200000: a fresh node's first seconds run far slower — JIT, first
// inserts — and would weigh on whichever setup warms up slowest),
// BENCH_AE_KEYS (default 200000), BENCH_CLUSTER_WORKERS (worker threads per node, default 1: three
// nodes share the cores), BENCH_CLUSTER_PARTS (any of throughput,lag,ae; default all),
// BENCH_CLUSTER_CORES_PER_NODE (default 0: no pinning; k: node i runs on cores i·k … i·k+k−1 and
// redis-benchmark on the cores after the third node's, through `taskset`, so each node has cores of
// its own as in a real cluster — it needs 3k+1 cores; run the harness's process on the spare cores
// too, e.g. `taskset -c 8-15 npm run bench:cluster`).

import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { parseOptions } from './load/options.js';
import { buildReport } from './load/report.js';
import { runLoad } from './load/run.js';
import { freePorts } from './ports.js';

const MAIN = fileURLToPath(new URL('../../dist/main.js', import.meta.url));
const SECONDS = Number(process.env.BENCH_CLUSTER_SECONDS ?? 10);
const AE_KEYS = Number(process.env.BENCH_AE_KEYS ?? 200_000);
const REQUESTS = Number(process.env.BENCH_CLUSTER_N ?? 600_000);
const WARMUP_REQUESTS = Number(process.env.BENCH_CLUSTER_WARMUP_N ?? 200_000);
const WORKERS = String(process.env.BENCH_CLUSTER_WORKERS ?? 1);
const CORES_PER_NODE = Number(process.env.BENCH_CLUSTER_CORES_PER_NODE ?? 0);
/** Cores of node `index` (`a-b` for taskset), or undefined when nodes are not pinned. */
const nodeCores = (index: number): string | undefined =>
  CORES_PER_NODE > 0 ? `${index * CORES_PER_NODE}-${(index + 1) * CORES_PER_NODE - 1}` : undefined;
/** The cores left to clients once three nodes are pinned. */
const clientCores = (): string | undefined =>
  CORES_PER_NODE > 0 ? `${3 * CORES_PER_NODE}-${availableParallelism() - 1}` : undefined;

/** Runs `command` pinned to `cores` through taskset, or as it is. */
function pinned(cores: string | undefined, command: string, args: string[]): [string, string[]] {
  return cores === undefined ? [command, args] : ['taskset', ['-c', cores, command, ...args]];
}
/** Which parts run: throughput, lag, ae (default all). */
const PARTS = new Set((process.env.BENCH_CLUSTER_PARTS ?? 'throughput,lag,ae').split(','));
/** The lag run's rate when the throughput part does not run to find the peak. */
const LAG_RATE_DEFAULT = 5000;
const SECRET = 'bench-cluster-secret-of-at-least-32-bytes';

const log = (line: string) => process.stderr.write(`${line}\n`);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

class BenchNode {
  child: ChildProcess | undefined;
  private output = '';
  constructor(
    readonly id: string,
    readonly port: number,
    readonly peerPort: number,
    readonly dataDir: string,
    private readonly args: string[],
    /** Cores the node is pinned to (taskset), if any. */
    private readonly cores: string | undefined,
  ) {}

  async start(): Promise<void> {
    const from = this.output.length;
    // taskset execs the node in its own process, so the pid stays the node's (CPU is read from it).
    const [command, argv] = pinned(this.cores, process.execPath, [
      MAIN,
      '--node-id',
      this.id,
      '--port',
      String(this.port),
      '--data-dir',
      this.dataDir,
      ...this.args,
    ]);
    const child = spawn(command, argv, {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, TESSERA_CLUSTER_SECRET: SECRET },
    });
    this.child = child;
    child.stdout!.on('data', (c: Buffer) => {
      this.output += c.toString();
    });
    child.stderr!.on('data', (c: Buffer) => {
      this.output += c.toString();
    });
    for (let waited = 0; !this.output.includes('"msg":"ready"', from); waited += 50) {
      if (child.exitCode !== null || waited > 60_000)
        throw new Error(`${this.id} did not start:\n${this.output}`);
      await sleep(50);
    }
  }

  async stop(signal: NodeJS.Signals): Promise<void> {
    const child = this.child;
    this.child = undefined;
    // A child that died of a signal has no exit code, and its exit event has been emitted.
    if (child === undefined || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((r) => child.once('exit', r));
    child.kill(signal);
    await exited;
  }
}

/** Starts `n` nodes as one cluster (no peers when n = 1). */
async function startNodes(
  label: string,
  n: number,
  extra: string[],
): Promise<{ nodes: BenchNode[]; dir: string }> {
  const dir = await mkdtemp(join(tmpdir(), `tessera-bench-${label}-`));
  const ids = ['a', 'b', 'c'].slice(0, n);
  const free = await freePorts(2 * ids.length);
  const ports = ids.map((_, i): [number, number] => [free[2 * i], free[2 * i + 1]]);
  const peers = ids.map((id, i) => `${id}@127.0.0.1:${ports[i][1]}`).join(',');
  const nodes = ids.map(
    (id, i) =>
      new BenchNode(
        id,
        ports[i][0],
        ports[i][1],
        join(dir, id),
        ['--workers', WORKERS, '--log-level', 'info', ...(n > 1 ? ['--peers', peers] : []), ...extra],
        nodeCores(i),
      ),
  );
  await Promise.all(nodes.map((node) => node.start()));
  if (n > 1) await waitFor(async () => (await connectedPeers(nodes[0])) === n - 1, 20_000);
  return { nodes, dir };
}

async function stopAll(nodes: BenchNode[], dir: string): Promise<void> {
  await Promise.all(nodes.map((node) => node.stop('SIGKILL')));
  await rm(dir, { recursive: true, force: true });
}

async function waitFor(check: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`condition not met within ${timeoutMs} ms`);
    await sleep(50);
  }
}

async function replicationInfo(node: BenchNode): Promise<Map<string, string>> {
  const redis = new Redis({ port: node.port, lazyConnect: true, maxRetriesPerRequest: 0 });
  try {
    await redis.connect();
    const text = (await redis.info('replication')) as string;
    return new Map(
      text
        .split('\r\n')
        .filter((l) => l.includes(':'))
        .map((l) => [l.slice(0, l.indexOf(':')), l.slice(l.indexOf(':') + 1)] as [string, string]),
    );
  } finally {
    redis.disconnect();
  }
}

async function connectedPeers(node: BenchNode): Promise<number> {
  return Number((await replicationInfo(node)).get('connected_slaves') ?? 0);
}

function field(info: Map<string, string>, key: string, name: string): number {
  const m = new RegExp(`(?:^|,)${name}=(\\d+)`).exec(info.get(key) ?? '');
  return m === null ? 0 : Number(m[1]);
}

/** One closed-loop (or, with `rate`, open-loop) SET run against `port`. */
async function setLoad(port: number, rate?: number) {
  const argv = ['--port', String(port), '--workload', 'set', '--connections', '50', '--pipeline', '16'];
  argv.push('--duration', `${SECONDS}s`, '--keys', '100000', '--quiet');
  if (rate !== undefined) argv.push('--rate', String(Math.round(rate)), '--pipeline', '1');
  const options = parseOptions(argv)!;
  return buildReport(await runLoad(options));
}

/** redis-benchmark SET, pipelined; `cluster` routes each key to its slot's primary. Ops/s and p99 ms. */
function redisBenchmark(port: number, cluster: boolean, requests = REQUESTS): { ops: number; p99Ms: number } {
  const args = ['-p', String(port), '-t', 'set', '-P', '16', '-c', '50', '-r', '100000', '-d', '100'];
  args.push('-n', String(requests), '--csv', ...(cluster ? ['--cluster'] : []));
  const [command, argv] = pinned(clientCores(), 'redis-benchmark', args);
  const run = spawnSync(command, argv, { encoding: 'utf8', timeout: 600_000 });
  const lines = run.stdout.trim().split('\n');
  // In cluster mode the CSV follows a list of the masters it found.
  const header = (lines.find((l) => l.startsWith('"test"')) ?? '').split(',').map((h) => h.replace(/"/g, ''));
  const row = lines
    .at(-1)!
    .split(',')
    .map((v) => v.replace(/"/g, ''));
  const ops = Number(row[header.indexOf('rps')]);
  if (!Number.isFinite(ops)) throw new Error(`redis-benchmark failed: ${run.stdout}${run.stderr}`);
  return { ops, p99Ms: Number(row[header.indexOf('p99_latency_ms')]) };
}

interface ThroughputRow {
  label: string;
  routed: { ops: number; p99Ms: number } | undefined;
  forwarded: { ops: number; p99Ms: number };
  /** CPU ms each node spent per 1000 client writes of the routed run (Linux /proc), if measured. */
  cpuMsPerKWrites: number[] | undefined;
  /** Replication buffers that overflowed into anti-entropy, all senders of all nodes, by the end. */
  bufferResets: number;
}

/**
 * Waits until every replication sender of every node finished its first anti-entropy round (each
 * runs one when its peer connects): a round running under the measured load would compare pages
 * that replication is still filling, which is the rejoin case, not the steady state measured here.
 */
async function firstRoundsDone(nodes: BenchNode[]): Promise<void> {
  await waitFor(async () => {
    for (const node of nodes) if ((await senderFields(node, 'rounds')).some((r) => r < 1)) return false;
    return true;
  }, 60_000);
}

/** One numeric field of every replication sender line a node reports (`sender_<f>_<peer>`). */
async function senderFields(node: BenchNode, name: string): Promise<number[]> {
  const info = await replicationInfo(node);
  return [...info.keys()].filter((key) => key.startsWith('sender_')).map((key) => field(info, key, name));
}

/** CPU time of a process (all its threads) in ms, from /proc; undefined where there is none. */
function cpuMs(pid: number | undefined): number | undefined {
  if (pid === undefined) return undefined;
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
    // utime and stime (fields 14 and 15 of the whole line), in clock ticks of 10 ms.
    return (Number(fields[11]) + Number(fields[12])) * 10;
  } catch {
    return undefined;
  }
}

async function throughput(): Promise<ThroughputRow[]> {
  const haveTools = spawnSync('redis-benchmark', ['--version']).status === 0;
  if (!haveTools) log('bench:cluster: redis-benchmark not found; only the forwarding runs are measured');
  const rows: ThroughputRow[] = [];
  for (const n of [1, 2, 3]) {
    const { nodes, dir } = await startNodes(`r${n}`, n, []);
    try {
      const label = n === 1 ? 'single node' : `R=${n} (${n} nodes)`;
      if (n > 1) await firstRoundsDone(nodes);
      if (haveTools && WARMUP_REQUESTS > 0) redisBenchmark(nodes[0].port, n > 1, WARMUP_REQUESTS);
      const before = nodes.map((node) => cpuMs(node.child?.pid));
      const routed = haveTools ? redisBenchmark(nodes[0].port, n > 1) : undefined;
      const after = nodes.map((node) => cpuMs(node.child?.pid));
      const measured =
        routed !== undefined && before.every((x) => x !== undefined) && after.every((x) => x !== undefined);
      const cpuMsPerKWrites = measured
        ? after.map((x, i) => ((x! - before[i]!) * 1000) / REQUESTS)
        : undefined;
      const report = await setLoad(nodes[0].port);
      const forwarded = { ops: report.totals.opsPerSec, p99Ms: report.all.latencyUs.p99 / 1000 };
      let bufferResets = 0;
      if (n > 1) {
        for (const node of nodes) for (const r of await senderFields(node, 'resets')) bufferResets += r;
      }
      log(
        `${label}: ${Math.round(routed?.ops ?? 0)} SET/s routed by slot, ${Math.round(forwarded.ops)} SET/s via node a`,
      );
      rows.push({ label, routed, forwarded, cpuMsPerKWrites, bufferResets });
    } finally {
      await stopAll(nodes, dir);
    }
  }
  return rows;
}

async function lag(peak: number): Promise<{ rate: number; p99Ms: number; maxMs: number; samples: number }> {
  const { nodes, dir } = await startNodes('lag', 3, []);
  try {
    const samples: number[] = [];
    let running = true;
    const sampler = (async () => {
      while (running) {
        for (const node of nodes)
          samples.push(Number((await replicationInfo(node)).get('replication_lag_ms') ?? 0));
        await sleep(100);
      }
    })();
    const rate = peak / 2;
    await setLoad(nodes[0].port, rate);
    running = false;
    await sampler;
    samples.sort((x, y) => x - y);
    const p99Ms = samples[Math.min(samples.length - 1, Math.floor(samples.length * 0.99))];
    return { rate, p99Ms, maxMs: samples[samples.length - 1], samples: samples.length };
  } finally {
    await stopAll(nodes, dir);
  }
}

async function antiEntropy(): Promise<{
  keys: number;
  changed: number;
  seconds: number;
  bytes: number;
  data: number;
}> {
  const { nodes, dir } = await startNodes('ae', 2, ['--anti-entropy-interval', '1h']);
  const [a, b] = nodes;
  try {
    const writer = new Redis({ port: a.port, maxRetriesPerRequest: 0 });
    const value = 'x'.repeat(100);
    for (let i = 0; i < AE_KEYS; i += 10_000) {
      const p = writer.pipeline();
      for (let k = i; k < Math.min(AE_KEYS, i + 10_000); k++) p.set(`ae:${k}`, value);
      await p.exec();
    }
    await waitFor(async () => (await replicationInfo(a)).get('replication_backlog_ops') === '0', 60_000);
    await b.stop('SIGTERM');
    const changed = Math.floor(AE_KEYS / 100);
    const keys: string[] = [];
    const p = writer.pipeline();
    for (let i = 0; i < changed; i++) {
      const key = `ae:${Math.floor((i * AE_KEYS) / changed)}`;
      keys.push(key);
      p.set(key, `changed-${i}-${value}`);
    }
    await p.exec();
    writer.disconnect();
    // a forgets its backlog for b: only anti-entropy can repair b now.
    await a.stop('SIGKILL');
    await a.start();
    const before = field(await replicationInfo(a), 'peer_b', 'anti_entropy_bytes_sent');
    const startedAt = Date.now();
    await b.start();
    const reader = new Redis({ port: b.port, maxRetriesPerRequest: 0 });
    await reader.call('READONLY');
    await waitFor(async () => {
      const values = await reader.mget(...keys);
      return values.every((v, i) => v === `changed-${i}-${value}`);
    }, 300_000);
    const seconds = (Date.now() - startedAt) / 1000;
    reader.disconnect();
    // Let the rounds in both directions finish before counting their bytes.
    await sleep(2000);
    const fromA = field(await replicationInfo(a), 'peer_b', 'anti_entropy_bytes_sent') - before;
    const fromB = field(await replicationInfo(b), 'peer_a', 'anti_entropy_bytes_sent');
    // What differed: each changed key and its new record (16-byte header, node id "a", value).
    const data = keys.reduce((n, k, i) => n + k.length + 16 + 1 + `changed-${i}-${value}`.length, 0);
    return { keys: AE_KEYS, changed, seconds, bytes: fromA + fromB, data };
  } finally {
    await stopAll(nodes, dir);
  }
}

async function main(): Promise<void> {
  if (CORES_PER_NODE > 0 && availableParallelism() < 3 * CORES_PER_NODE + 1) {
    log(
      `bench:cluster: BENCH_CLUSTER_CORES_PER_NODE=${CORES_PER_NODE} needs ${3 * CORES_PER_NODE + 1} cores; this machine has ${availableParallelism()}`,
    );
    process.exitCode = 2;
    return;
  }
  log(
    `bench:cluster: ${SECONDS}s per throughput run, ${AE_KEYS} keys for anti-entropy, ${WORKERS} worker(s) per node`,
  );
  const out: string[] = [];
  let peak = LAG_RATE_DEFAULT * 2;
  if (PARTS.has('throughput')) {
    const rows = await throughput();
    out.push(
      '| setup | routed by slot: SET/s | ratio | p99 ms | all via node a: SET/s | ratio | p99 ms |',
      '|---|---:|---:|---:|---:|---:|---:|',
    );
    const cell = (x: { ops: number; p99Ms: number } | undefined, base: { ops: number } | undefined) =>
      x === undefined || base === undefined
        ? '– | – | –'
        : `${Math.round(x.ops)} | ${(x.ops / base.ops).toFixed(2)} | ${x.p99Ms.toFixed(2)}`;
    for (const r of rows) {
      out.push(
        `| ${r.label} | ${cell(r.routed, rows[0].routed)} | ${cell(r.forwarded, rows[0].forwarded)} |`,
      );
    }
    peak = rows[2].forwarded.ops;
    const single = rows[0].cpuMsPerKWrites?.[0];
    if (single !== undefined) {
      out.push(
        '',
        'CPU per 1000 client writes in the routed run (all threads of each node), and the throughput ratio it',
        'projects where every node has cores of its own (single node CPU per write ÷ the busiest node’s):',
        '',
        '| setup | CPU ms per 1000 writes, per node | busiest | projected ratio | replication buffer resets |',
        '|---|---|--:|--:|--:|',
      );
      for (const r of rows) {
        const cpu = r.cpuMsPerKWrites;
        if (cpu === undefined) continue;
        const busiest = Math.max(...cpu);
        out.push(
          `| ${r.label} | ${cpu.map((x) => x.toFixed(1)).join(' / ')} | ${busiest.toFixed(1)} | ${(single / busiest).toFixed(2)} | ${r.bufferResets} |`,
        );
      }
    }
  }
  if (PARTS.has('lag')) {
    const l = await lag(peak);
    out.push(
      '',
      `Replication lag, 3 nodes at ${Math.round(l.rate)} SET/s (half of R=3 peak), ${l.samples} samples: ` +
        `p99 ${l.p99Ms} ms, max ${l.maxMs} ms.`,
    );
  }
  if (PARTS.has('ae')) {
    const ae = await antiEntropy();
    out.push(
      '',
      `Anti-entropy repair of ${ae.changed} changed keys of ${ae.keys} (1 %): ${ae.seconds.toFixed(1)} s; ` +
        `${ae.bytes} bytes of anti-entropy traffic (both directions) for ${ae.data} bytes of changed data ` +
        `= ${(ae.bytes / ae.data).toFixed(1)}×.`,
    );
  }
  process.stdout.write(`${out.join('\n')}\n`);
}

main().catch((err: unknown) => {
  process.stderr.write(`bench:cluster: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exitCode = 1;
});
