// What waiting for replicas costs (`npm run build:test && node .build/bench/replica-acks.js`): a
// 3-node cluster (R=3) of real processes on loopback.
//
//   1. SET + WAIT 2 0 at -P1: one client on node a, each SET followed by a WAIT for both other
//      replicas; the pair's latency percentiles (goal: p99 ≤ 2 ms). Beside it, where the pair's time
//      goes: SET alone, and SET followed by WAIT 0, 1 and 2, at the same -P1.
//   2. SET throughput with 50 clients (one request in flight each) on node a, with TESSERA.DURABILITY
//      store REPLICAS n for n = 0, 1, 2, as a ratio to n = 0 (goal: ≥ 0.7). Each n runs once first,
//      unmeasured (a fresh cluster's first seconds of a kind of write cost up to ~1.8× the later
//      ones: the JIT, the stores' first pages), then BENCH_ACKS_ROUNDS rounds of 0, 1, 2 in turn,
//      each round's ratios against its own n = 0, so a host whose speed drifts compares neighbours.
//
// Environment: BENCH_ACKS_SECONDS (per measured run, default 5), BENCH_ACKS_CLIENTS (default 50),
// BENCH_ACKS_ROUNDS (default 2).

import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { freePorts } from './ports.js';

const MAIN = fileURLToPath(new URL('../src/main.js', import.meta.url));
const SECONDS = Number(process.env.BENCH_ACKS_SECONDS ?? 5);
const CLIENTS = Number(process.env.BENCH_ACKS_CLIENTS ?? 50);
const ROUNDS = Number(process.env.BENCH_ACKS_ROUNDS ?? 2);
const SECRET = 'bench-cluster-secret-of-at-least-32-bytes';
const IDS = ['a', 'b', 'c'];

async function startCluster(dir: string): Promise<{ ports: number[]; stop: () => Promise<void> }> {
  const free = await freePorts(2 * IDS.length);
  const peers = IDS.map((id, i) => `${id}@127.0.0.1:${free[2 * i + 1]}`).join(',');
  const children: ChildProcess[] = IDS.map((id, i) =>
    spawn(
      process.execPath,
      [MAIN, '--node-id', id, '--port', String(free[2 * i]), '--data-dir', join(dir, id), '--peers', peers],
      { stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, TESSERA_CLUSTER_SECRET: SECRET } },
    ),
  );
  await Promise.all(
    children.map(
      (child) =>
        new Promise<void>((resolve) => {
          let out = '';
          child.stdout!.on('data', (chunk: Buffer) => {
            out += chunk.toString();
            if (out.includes('"msg":"ready"')) resolve();
          });
        }),
    ),
  );
  const ports = IDS.map((_, i) => free[2 * i]!);
  // Every node connected to both others before measuring.
  const probe = new Redis(ports[0]!);
  for (;;) {
    const info = await probe.info('replication');
    if (/connected_slaves:2/.test(info)) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  probe.disconnect();
  return {
    ports,
    stop: async () => {
      await Promise.all(
        children.map(
          (c) =>
            new Promise<void>((resolve) => {
              c.once('exit', () => resolve());
              c.kill('SIGKILL');
            }),
        ),
      );
    },
  };
}

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

/** SET, then `WAIT replicas 0` unless `replicas` is undefined, at -P1 for SECONDS: the latencies. */
async function setWait(port: number, replicas: number | undefined, seconds = SECONDS): Promise<string> {
  const c = new Redis(port);
  const latencies: number[] = [];
  const end = performance.now() + seconds * 1000;
  for (let i = 0; performance.now() < end; i++) {
    const start = performance.now();
    await c.set(`sw:${i}`, 'x'.repeat(100));
    if (replicas !== undefined) {
      const reached = await c.wait(replicas, 0);
      if (reached < replicas) throw new Error(`WAIT ${replicas} 0 answered ${reached}`);
    }
    latencies.push(performance.now() - start);
  }
  c.disconnect();
  latencies.sort((a, b) => a - b);
  const f = (ms: number) => ms.toFixed(2);
  const what = replicas === undefined ? 'SET alone' : `SET+WAIT ${replicas} 0`;
  return `${what} -P1: ${latencies.length} in ${seconds}s, p50 ${f(percentile(latencies, 50))} ms, p99 ${f(percentile(latencies, 99))} ms, p99.9 ${f(percentile(latencies, 99.9))} ms`;
}

/** SETs per second of CLIENTS clients at -P1 asking `replicas` acks each, each SET followed by `WAIT waitFor 0` if given. */
async function throughput(port: number, replicas: number, waitFor?: number): Promise<number> {
  const clients = Array.from({ length: CLIENTS }, () => new Redis(port));
  for (const c of clients) await c.call('TESSERA.DURABILITY', 'store', 'REPLICAS', String(replicas));
  let done = 0;
  const end = performance.now() + SECONDS * 1000;
  await Promise.all(
    clients.map(async (c, n) => {
      for (let i = 0; performance.now() < end; i++) {
        await c.set(`tp:${replicas}:${n}:${i % 10_000}`, 'x'.repeat(100));
        if (waitFor !== undefined) await c.wait(waitFor, 0);
        done++;
      }
    }),
  );
  for (const c of clients) c.disconnect();
  return done / SECONDS;
}

const dir = await mkdtemp(join(tmpdir(), 'tessera-bench-acks-'));
const cluster = await startCluster(dir);
try {
  const port = cluster.ports[0]!;
  // Warm-up: the JIT and first inserts, then the WAIT path too (cold, the pair's p99 was ~1.7× its
  // later runs' even after the SETs were warm).
  await throughput(port, 0);
  await throughput(port, 0, 2);
  console.log(await setWait(port, 2));
  // Where a pair's time goes, in shorter runs of each part.
  for (const replicas of [undefined, 0, 1, 2]) console.log(`  ${await setWait(port, replicas, SECONDS / 2)}`);
  // Each kind of write once before any is measured (the pair's warm-up above ran n = 0).
  for (const n of [1, 2]) await throughput(port, n);
  for (let round = 1; round <= ROUNDS; round++) {
    const base = await throughput(port, 0);
    const parts = [
      `round ${round}: SET, ${CLIENTS} clients -P1, --replica-acks 0: ${Math.round(base)} ops/s`,
    ];
    for (const n of [1, 2]) {
      const ops = await throughput(port, n);
      parts.push(`${n}: ${Math.round(ops)} ops/s, ratio ${(ops / base).toFixed(2)}`);
    }
    console.log(parts.join('; '));
  }
} finally {
  await cluster.stop();
  await rm(dir, { recursive: true, force: true });
}
