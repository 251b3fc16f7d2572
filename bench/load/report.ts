// A run's result as data (the JSON file), as a table for the terminal, and its final line. The SVG
// chart is drawn from the same data (report-svg.ts).

import type { PhaseResult } from './driver.js';
import { SERIES_INTERVAL_MS } from './driver.js';
import { type CurvePoint, LatencyHistogram, type LatencySummary } from './histogram.js';
import type { LoadResult } from './run.js';
import { OP_INSERT, OP_NAMES } from './workloads.js';

/** The open loop "fell short" when it completed less than this share of its target rate. */
export const OPEN_LOOP_ACHIEVED_SHARE_MIN = 0.95;

export interface OpReport {
  count: number;
  errors: number;
  misses: number;
  opsPerSec: number;
  latencyUs: { min: number; mean: number; p50: number; p90: number; p99: number; p999: number; max: number };
}

export interface PhaseReport {
  elapsedMs: number;
  /** Successful operations, failed operations, and every error (failed operations and lost connections). */
  totals: { ops: number; failedOps: number; errors: number; misses: number; opsPerSec: number };
  ops: Record<string, OpReport>;
  all: OpReport;
  errors: Record<string, { count: number; sample: string }>;
}

export interface LoadReport extends PhaseReport {
  tool: 'tessera-load';
  version: 1;
  startedAt: string;
  config: Record<string, string | number | boolean | null>;
  workload: { name: string; title: string; mix: Record<string, number>; distribution: string };
  mode: 'closed' | 'open';
  preload: PhaseReport | null;
  openLoop: {
    targetRate: number;
    intendedOps: number;
    sentOps: number;
    unsentOps: number;
    achievedRate: number;
    fellShort: boolean;
    serviceUs: OpReport['latencyUs'];
  } | null;
  /** Latency by percentile, per operation and `all` (HdrHistogram's percentile plot). */
  curves: Record<string, CurvePoint[]>;
  series: { intervalMs: number; ops: number[]; errors: number[] };
}

export function buildReport(result: LoadResult): LoadReport {
  const { options, spec, run } = result;
  const phase = phaseReport(
    run,
    spec.mix.map(([kind]) => kind),
  );
  const curves: Record<string, CurvePoint[]> = {};
  for (const [kind] of spec.mix) curves[OP_NAMES[kind]] = run.histograms[kind].curve();
  curves.all = merged(run).curve();
  const completed = phase.totals.ops + phase.totals.failedOps;
  const achievedRate = completed / Math.max(run.elapsedMs / 1000, 1e-3);
  return {
    tool: 'tessera-load',
    version: 1,
    startedAt: new Date(run.startedAtMs).toISOString(),
    config: {
      host: options.host,
      port: options.port,
      auth: options.password !== undefined,
      workload: options.workload,
      distribution: options.distribution,
      theta: options.theta,
      readRatio: options.workload === 'mixed' ? options.readRatio : null,
      keys: options.keys,
      valueBytes: options.valueBytes,
      keyPrefix: options.keyPrefix,
      scanLengthMax: options.scanLengthMax,
      connections: options.connections,
      pipeline: options.pipeline,
      durationMs: options.durationMs ?? null,
      ops: options.ops ?? null,
      rate: options.rate ?? null,
      load: options.load,
      seed: options.seed,
      timeoutMs: options.timeoutMs,
    },
    workload: {
      name: spec.name,
      title: spec.title,
      mix: Object.fromEntries(spec.mix.map(([kind, share]) => [OP_NAMES[kind], share])),
      distribution: options.distribution,
    },
    mode: options.rate === undefined ? 'closed' : 'open',
    preload: result.preload === undefined ? null : phaseReport(result.preload, [OP_INSERT]),
    openLoop:
      options.rate === undefined || run.service === undefined
        ? null
        : {
            targetRate: options.rate,
            intendedOps: run.intendedOps,
            sentOps: run.sentOps,
            unsentOps: run.intendedOps - run.sentOps,
            achievedRate: round(achievedRate),
            fellShort:
              run.sentOps < run.intendedOps || achievedRate < OPEN_LOOP_ACHIEVED_SHARE_MIN * options.rate,
            serviceUs: latency(run.service.summary()),
          },
    ...phase,
    curves,
    series: { intervalMs: SERIES_INTERVAL_MS, ...padded(run.seriesOps, run.seriesErrors) },
  };
}

function phaseReport(phase: PhaseResult, kinds: number[]): PhaseReport {
  const seconds = Math.max(phase.elapsedMs / 1000, 1e-3);
  const ops: Record<string, OpReport> = {};
  let failedOps = 0;
  let misses = 0;
  for (const kind of kinds) {
    ops[OP_NAMES[kind]] = opReport(phase.histograms[kind], phase.failed[kind], phase.misses[kind], seconds);
    failedOps += phase.failed[kind];
    misses += phase.misses[kind];
  }
  const all = opReport(merged(phase), failedOps, misses, seconds);
  const errors: PhaseReport['errors'] = {};
  let errorTotal = 0;
  for (const [kind, entry] of [...phase.errors].sort((a, b) => b[1].count - a[1].count)) {
    errors[kind] = { count: entry.count, sample: entry.sample };
    errorTotal += entry.count;
  }
  return {
    elapsedMs: round(phase.elapsedMs),
    totals: { ops: all.count, failedOps, errors: errorTotal, misses, opsPerSec: all.opsPerSec },
    ops,
    all,
    errors,
  };
}

/** Both series over the same seconds (a bucket exists once something completed in it or later). */
function padded(ops: number[], errors: number[]): { ops: number[]; errors: number[] } {
  const length = Math.max(ops.length, errors.length);
  const pad = (xs: number[]) => xs.concat(new Array<number>(length - xs.length).fill(0));
  return { ops: pad(ops), errors: pad(errors) };
}

function merged(phase: PhaseResult): LatencyHistogram {
  const all = new LatencyHistogram();
  for (const h of phase.histograms) if (h.count > 0) all.add(h);
  return all;
}

function opReport(h: LatencyHistogram, errors: number, misses: number, seconds: number): OpReport {
  const s = h.summary();
  return { count: s.count, errors, misses, opsPerSec: round(s.count / seconds), latencyUs: latency(s) };
}

function latency(s: LatencySummary): OpReport['latencyUs'] {
  return {
    min: s.minUs,
    mean: s.meanUs,
    p50: s.p50Us,
    p90: s.p90Us,
    p99: s.p99Us,
    p999: s.p999Us,
    max: s.maxUs,
  };
}

function round(x: number): number {
  return Math.round(x * 10) / 10;
}

// ── Text ──────────────────────────────────────────────────────────────────────────────────────

/** The summary table, with the run's shape above it and the notes below. */
export function formatReport(r: LoadReport): string {
  const c = r.config;
  const lines: string[] = [];
  const dist = r.workload.distribution === 'uniform' ? 'uniform' : `${r.workload.distribution} θ=${c.theta}`;
  lines.push(
    `workload ${r.workload.name} (${r.workload.title}), ${dist}, ${c.keys} keys, ${c.valueBytes} B values`,
  );
  const shape = r.mode === 'open' ? `open loop at ${c.rate} ops/s` : 'closed loop';
  lines.push(
    `${c.host}:${c.port}, ${c.connections} connections × pipeline ${c.pipeline}, ${shape}, ` +
      `${(r.elapsedMs / 1000).toFixed(1)} s`,
  );
  if (r.preload !== null) {
    const p = r.preload;
    lines.push(
      `preload: ${p.totals.ops} keys in ${(p.elapsedMs / 1000).toFixed(1)} s (${fmtInt(p.totals.opsPerSec)} keys/s), ` +
        `${p.totals.errors} errors`,
    );
  }
  lines.push('');
  lines.push(table(r));
  lines.push('');
  const full = r.series.ops.slice(0, Math.floor(r.elapsedMs / r.series.intervalMs));
  if (full.length > 0) {
    const mean = full.reduce((a, b) => a + b, 0) / full.length;
    lines.push(
      `throughput per second: min ${fmtInt(Math.min(...full))}, mean ${fmtInt(mean)}, ` +
        `max ${fmtInt(Math.max(...full))} (${full.length} whole seconds)`,
    );
  }
  const o = r.openLoop;
  if (o !== null) {
    const share = ((100 * o.achievedRate) / o.targetRate).toFixed(1);
    lines.push(
      `open loop: target ${fmtInt(o.targetRate)} ops/s, achieved ${fmtInt(o.achievedRate)} ops/s (${share}%), ` +
        `${o.sentOps} of ${o.intendedOps} scheduled operations sent; latency counts from the intended send time`,
    );
    lines.push(
      `service time (from the actual send): p50 ${fmtMs(o.serviceUs.p50)} ms, p99 ${fmtMs(o.serviceUs.p99)} ms, ` +
        `max ${fmtMs(o.serviceUs.max)} ms`,
    );
    if (o.fellShort)
      lines.push('WARNING: the target did not keep up: the achieved rate fell short of --rate');
  }
  for (const [kind, e] of Object.entries(r.errors)) lines.push(`error ${kind} ×${e.count}: ${e.sample}`);
  return lines.join('\n');
}

function table(r: LoadReport): string {
  const header = [
    'op',
    'ops',
    'ops/s',
    'p50 ms',
    'p90 ms',
    'p99 ms',
    'p99.9 ms',
    'max ms',
    'errors',
    'misses',
  ];
  const rows = Object.entries(r.ops).map(([name, op]) => row(name, op));
  if (Object.keys(r.ops).length > 1) rows.push(row('all', r.all));
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((cells) => cells[i].length)));
  const fmt = (cells: string[]) =>
    cells.map((cell, i) => (i === 0 ? cell.padEnd(widths[i]) : cell.padStart(widths[i]))).join('  ');
  return [fmt(header), ...rows.map(fmt)].join('\n');
}

function row(name: string, op: OpReport): string[] {
  const l = op.latencyUs;
  return [
    name,
    fmtInt(op.count),
    fmtInt(op.opsPerSec),
    fmtMs(l.p50),
    fmtMs(l.p90),
    fmtMs(l.p99),
    fmtMs(l.p999),
    fmtMs(l.max),
    fmtInt(op.errors),
    fmtInt(op.misses),
  ];
}

/** The run's last line: whether any operation failed. */
export function finalLine(r: LoadReport): string {
  const total = r.totals.errors + (r.preload?.totals.errors ?? 0);
  if (total === 0) return 'errors: 0';
  const kinds = new Map<string, number>();
  for (const phase of [r.preload, r]) {
    if (phase === null) continue;
    for (const [kind, e] of Object.entries(phase.errors)) kinds.set(kind, (kinds.get(kind) ?? 0) + e.count);
  }
  const list = [...kinds].map(([kind, n]) => `${kind} ×${n}`).join(', ');
  return `FAILED: ${total} errors (${list})`;
}

export function fmtInt(n: number): string {
  return Math.round(n).toLocaleString('en-US');
}

/** Microseconds as milliseconds, three significant decimals for small values. */
export function fmtMs(us: number): string {
  const ms = us / 1000;
  if (ms < 10) return ms.toFixed(3);
  if (ms < 100) return ms.toFixed(2);
  return ms.toFixed(1);
}
