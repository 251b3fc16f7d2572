// `npm run bench:compare`: Tessera against redis-server at matching durability, and against raw lmdb
// in one process, as ONE markdown table of ratios measured in the same run. The table goes to stdout
// and, with the commands behind it, into bench/RESULTS.md between the bench:compare markers (the
// rest of the file is kept). Progress goes to stderr.
//
//   redis-server                                     tessera --store lmdb
//   --save '' --appendonly no                        --durability memory
//   --appendonly yes --appendfsync everysec          --durability store
//   --appendonly yes --appendfsync always            --durability stable
//
// For each pair, a fresh redis-server and a fresh Tessera (temp directory, free port, loopback) run
// side by side and get the same runs, taking turns (redis-server first) at each one:
//   redis-benchmark -t set,get -P 16 -c 50 -r 100000 -d 100 -n N --csv      (throughput and p99)
//   redis-benchmark -t set,get -P 1  -c 50 -r 100000 -d 100 -n N_P1 --csv
//   the load harness (bench/load), closed loop, 50 connections, pipeline 1, workloads a b c set
// Then the embedded suite (`bench/run.ts --only embedded`: the embedded API against raw lmdb in one
// process) and Tessera with --workers 1 against --workers 2 on the harness's set workload.
//
// Environment (defaults in brackets; BENCH_COMPARE_QUICK=1 switches to the quick column):
//   BENCH_COMPARE_QUICK=1       a ~1-minute smoke run; does not write RESULTS.md unless WRITE=1
//   BENCH_COMPARE_N             redis-benchmark requests per test at -P 16      [200000 | 20000]
//   BENCH_COMPARE_N_P1          redis-benchmark requests per test at -P 1       [50000 | 5000]
//   BENCH_COMPARE_DURATION      harness run per workload, e.g. 10s              [10s | 2s]
//   BENCH_COMPARE_KEYS          harness keys (preloaded before its first run)   [100000 | 10000]
//   BENCH_COMPARE_BENCH_MS      tinybench time per embedded task (ms)           [1000 | 200]
//   BENCH_COMPARE_CLIENTS       connections, both tools                         [50]
//   BENCH_COMPARE_REPEATS       measured redis-benchmark runs, best kept        [2 | 1]
//   BENCH_COMPARE_WORKERS       Tessera worker threads for the redis pairs      [a node's default: cores − 1, at most 2]
//   BENCH_COMPARE_PAIRS         subset of memory,store,stable                   [all]
//   BENCH_COMPARE_WORKLOADS     harness workloads                               [a,b,c,set]
//   BENCH_COMPARE_ONLY          subset of redis-benchmark,load,embedded,workers [all]
//   BENCH_COMPARE_TIMEOUT_S     limit per client command                        [300]
//   BENCH_COMPARE_WRITE=0|1     write bench/RESULTS.md                          [1 | 0]
//   BENCH_COMPARE_JSON=FILE     also write the rows as JSON
//
// Exit status: 0 when every measurement succeeded, 1 when one failed (RESULTS.md is then left alone),
// 2 for bad settings or missing tools.

import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import {
  closeSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { createConnection } from 'node:net';
import { cpus, loadavg, tmpdir, totalmem } from 'node:os';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { defaultWorkerCount } from '../src/main/config.js';
import type { BenchRow } from './common.js';
import type { LoadReport } from './load/report.js';
import { freePorts } from './ports.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const TESSERA_MAIN = join(ROOT, 'dist', 'main.js');
const LOAD_MAIN = fileURLToPath(new URL('./load/main.js', import.meta.url));
const BENCH_RUN = fileURLToPath(new URL('./run.js', import.meta.url));
const RESULTS = join(ROOT, 'bench', 'RESULTS.md');
const MARK_START = '<!-- bench:compare:start -->';
const MARK_END = '<!-- bench:compare:end -->';
/** Where the section goes in RESULTS.md when the markers are not there yet (else: the end). */
const INSERT_BEFORE = '\n## Where the goals stand';
const READY_TIMEOUT_MS = 30_000;
const STOP_TIMEOUT_MS = 30_000;
/** redis-benchmark's key space (-r), fixed whatever the mode. */
const RB_KEYSPACE = 100_000;
const VALUE_BYTES = 100;

const PAIRS = ['memory', 'store', 'stable'] as const;
type Pair = (typeof PAIRS)[number];
const REDIS_FLAGS: Record<Pair, string[]> = {
  memory: ['--appendonly', 'no'],
  store: ['--appendonly', 'yes', '--appendfsync', 'everysec'],
  stable: ['--appendonly', 'yes', '--appendfsync', 'always'],
};
const REDIS_LABEL: Record<Pair, string> = {
  memory: 'redis no persistence',
  store: 'redis AOF everysec',
  stable: 'redis AOF always',
};
const SECTIONS = ['redis-benchmark', 'load', 'embedded', 'workers'] as const;
type Section = (typeof SECTIONS)[number];

class SettingError extends Error {}

// ── Settings ──────────────────────────────────────────────────────────────────────────────────

interface Settings {
  quick: boolean;
  n: number;
  nP1: number;
  duration: string;
  keys: number;
  benchMs: number;
  clients: number;
  workers: number;
  /** Measured redis-benchmark runs per test; the best is kept. */
  repeats: number;
  pairs: Pair[];
  workloads: string[];
  sections: Set<Section>;
  timeoutMs: number;
  write: boolean;
  json: string | undefined;
}

function settings(env: NodeJS.ProcessEnv): Settings {
  const quick = flag(env, 'BENCH_COMPARE_QUICK', false);
  const int = (name: string, full: number, smoke: number, min = 1) => {
    const text = env[name];
    if (text === undefined || text === '') return quick ? smoke : full;
    const n = Number(text);
    if (!Number.isSafeInteger(n) || n < min) throw new SettingError(`${name} must be an integer ≥ ${min}`);
    return n;
  };
  const list = <T extends string>(name: string, allowed: readonly T[], fallback: readonly T[]): T[] => {
    const text = env[name];
    if (text === undefined || text.trim() === '') return [...fallback];
    const items = text.split(/[\s,]+/).filter((s) => s !== '');
    for (const item of items) {
      if (!allowed.includes(item as T))
        throw new SettingError(`${name}: unknown '${item}'; known: ${allowed.join(', ')}`);
    }
    return items as T[];
  };
  const duration = env.BENCH_COMPARE_DURATION || (quick ? '2s' : '10s');
  if (!/^[0-9]+(\.[0-9]+)?(ms|s|m)?$/.test(duration))
    throw new SettingError(`BENCH_COMPARE_DURATION must look like 10s or 500ms, not '${duration}'`);
  const workloads = ['a', 'b', 'c', 'd', 'e', 'f', 'set', 'get', 'mixed'];
  return {
    quick,
    n: int('BENCH_COMPARE_N', 200_000, 20_000),
    nP1: int('BENCH_COMPARE_N_P1', 50_000, 5_000),
    duration,
    keys: int('BENCH_COMPARE_KEYS', 100_000, 10_000),
    benchMs: int('BENCH_COMPARE_BENCH_MS', 1000, 200, 10),
    clients: int('BENCH_COMPARE_CLIENTS', 50, 50),
    repeats: int('BENCH_COMPARE_REPEATS', 2, 1),
    workers: int('BENCH_COMPARE_WORKERS', defaultWorkerCount(), defaultWorkerCount()),
    pairs: list('BENCH_COMPARE_PAIRS', PAIRS, PAIRS),
    workloads: list('BENCH_COMPARE_WORKLOADS', workloads, ['a', 'b', 'c', 'set']),
    sections: new Set(list('BENCH_COMPARE_ONLY', SECTIONS, SECTIONS)),
    timeoutMs: int('BENCH_COMPARE_TIMEOUT_S', 300, 300) * 1000,
    write: flag(env, 'BENCH_COMPARE_WRITE', !quick),
    json: env.BENCH_COMPARE_JSON || undefined,
  };
}

function flag(env: NodeJS.ProcessEnv, name: string, fallback: boolean): boolean {
  const text = env[name];
  if (text === undefined || text === '') return fallback;
  if (/^(1|true|yes)$/i.test(text)) return true;
  if (/^(0|false|no)$/i.test(text)) return false;
  throw new SettingError(`${name} must be 0 or 1, not '${text}'`);
}

/** The settings that differ from the full run's defaults, as they would be typed. */
function settingsShown(env: NodeJS.ProcessEnv): string {
  return Object.keys(env)
    .filter(
      (k) => k.startsWith('BENCH_COMPARE_') && k !== 'BENCH_COMPARE_JSON' && k !== 'BENCH_COMPARE_WRITE',
    )
    .sort()
    .map((k) => `${k}=${shellQuote(env[k] ?? '')} `)
    .join('');
}

// ── Processes and cleanup ─────────────────────────────────────────────────────────────────────

const children = new Set<ChildProcess>();
let tmpRoot: string | undefined;

/** Kills whatever is still running and removes the temp directory; safe to call twice. */
function cleanupNow(): void {
  for (const child of children) {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  }
  children.clear();
  if (tmpRoot !== undefined) rmSync(tmpRoot, { recursive: true, force: true });
  tmpRoot = undefined;
}

function track(child: ChildProcess): ChildProcess {
  children.add(child);
  child.on('exit', () => children.delete(child));
  return child;
}

function exited(child: ChildProcess): boolean {
  return child.exitCode !== null || child.signalCode !== null;
}

interface Exec {
  code: number | null;
  stdout: string;
  stderr: string;
  timedOut: boolean;
}

/** Runs a command to its end (killed after timeoutMs), collecting its output. */
function exec(cmd: string, args: string[], timeoutMs: number, env?: NodeJS.ProcessEnv): Promise<Exec> {
  return new Promise((resolve) => {
    const child = track(spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'], env: env ?? process.env }));
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout?.on('data', (b: Buffer) => out.push(b));
    child.stderr?.on('data', (b: Buffer) => err.push(b));
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill('SIGKILL');
    }, timeoutMs);
    child.on('error', (e) => {
      clearTimeout(timer);
      resolve({ code: null, stdout: '', stderr: e.message, timedOut });
    });
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({
        code,
        stdout: Buffer.concat(out).toString('utf8'),
        stderr: Buffer.concat(err).toString('utf8'),
        timedOut,
      });
    });
  });
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** True when a RESP server on the port answers PING with PONG within a second. */
function ping(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection({ host: '127.0.0.1', port });
    let reply = '';
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(1000, () => done(false));
    socket.on('error', () => done(false));
    socket.on('connect', () => socket.write('PING\r\n'));
    socket.on('data', (b) => {
      reply += b.toString('latin1');
      if (reply.includes('\r\n')) done(reply.startsWith('+PONG'));
    });
  });
}

interface Server {
  name: string;
  port: number;
  child: ChildProcess;
  log: string;
}

/** The 1-minute load average as each server starts: other processes on the machine show here. */
const loads: number[] = [];

async function startRedis(pair: Pair, dir: string): Promise<Server> {
  loads.push(loadavg()[0]);
  mkdirSync(dir, { recursive: true });
  const [port] = await freePorts(1);
  const log = join(dir, 'redis.log');
  const args = [
    '--port',
    String(port),
    '--bind',
    '127.0.0.1',
    '--daemonize',
    'no',
    '--dir',
    dir,
    '--save',
    '',
    '--logfile',
    log,
    ...REDIS_FLAGS[pair],
  ];
  record('server', 'redis-server', args, port);
  const child = track(spawn('redis-server', args, { stdio: 'ignore' }));
  const deadline = Date.now() + READY_TIMEOUT_MS;
  while (!(await ping(port))) {
    if (exited(child) || Date.now() > deadline) {
      throw new Error(`redis-server (${pair}) did not start:\n${readTail(log)}`);
    }
    await sleep(100);
  }
  return { name: `redis-server ${pair}`, port, child, log };
}

async function startTessera(level: Pair, workers: number, dir: string): Promise<Server> {
  loads.push(loadavg()[0]);
  mkdirSync(dir, { recursive: true });
  const log = `${dir}.log`;
  const fd = openSync(log, 'w');
  const args = [
    TESSERA_MAIN,
    '--store',
    'lmdb',
    '--durability',
    level,
    '--data-dir',
    dir,
    '--port',
    '0',
    '--workers',
    String(workers),
  ];
  record('server', process.execPath, args);
  const child = track(spawn(process.execPath, args, { stdio: ['ignore', fd, fd] }));
  closeSync(fd);
  const deadline = Date.now() + READY_TIMEOUT_MS;
  for (;;) {
    const match = /"port":(\d+)[^\n]*"msg":"ready"/.exec(readFileSync(log, 'utf8'));
    if (match !== null) {
      const port = Number(match[1]);
      if (await ping(port)) return { name: `tessera ${level} x${workers}`, port, child, log };
    }
    if (exited(child) || Date.now() > deadline) {
      throw new Error(`tessera (${level}, ${workers} workers) did not start:\n${readTail(log)}`);
    }
    await sleep(100);
  }
}

async function stop(server: Server): Promise<void> {
  const { child } = server;
  if (exited(child)) return;
  const gone = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), STOP_TIMEOUT_MS);
  await gone;
  clearTimeout(timer);
}

function readTail(file: string, chars = 2000): string {
  try {
    return readFileSync(file, 'utf8').slice(-chars);
  } catch {
    return '(no log)';
  }
}

// ── The commands, as a reader would type them ────────────────────────────────────────────────

/** Which part of the run is going on: commands are listed by part in RESULTS.md. */
type Part = 'pairs' | 'embedded' | 'workers';
let part: Part = 'pairs';
/** Commands by "<part> <server|client>", each distinct line once, in order. */
const commands = new Map<string, string[]>();

/**
 * Remembers a command for RESULTS.md as a reader would type it: `$PORT` for the port, `$DIR` for the
 * server's fresh temp directory, `result.json` for an output file.
 */
function record(role: 'server' | 'client', cmd: string, args: string[], port?: number, prefix = ''): void {
  const shown = [cmd === process.execPath ? 'node' : cmd, ...args].map((arg) => {
    if (port !== undefined && arg === String(port)) return '$PORT';
    if (tmpRoot !== undefined && arg.startsWith(`${tmpRoot}/`)) {
      if (arg.endsWith('.json')) return 'result.json';
      const rest = arg.slice(tmpRoot.length + 1);
      const slash = rest.indexOf('/');
      return slash === -1 ? '$DIR' : `$DIR${rest.slice(slash)}`;
    }
    return shellQuote(arg.startsWith(ROOT) ? relative(ROOT, arg) : arg);
  });
  const line = prefix + shown.join(' ');
  const key = `${part} ${role}`;
  const lines = commands.get(key) ?? [];
  if (!lines.includes(line)) lines.push(line);
  commands.set(key, lines);
}

/** The commands of the run, by part, as a commented shell listing. */
function commandListing(): string[] {
  const group = (key: string) => commands.get(key) ?? [];
  const out: string[] = [];
  const add = (comment: string[], lines: string[]) => {
    if (lines.length === 0) return;
    if (out.length > 0) out.push('');
    out.push(...comment.map((c) => `# ${c}`), ...lines);
  };
  add(
    [
      'Each durability pair: a fresh redis-server and a fresh Tessera, side by side. $DIR: a new temp',
      'directory; $PORT: a free port (Tessera picks one and logs it in its "ready" line).',
    ],
    group('pairs server'),
  );
  add(
    ['Against both servers of a pair, in this order, each command run against one and then the other:'],
    group('pairs client'),
  );
  add(['The embedded API against raw lmdb, in one process:'], group('embedded client'));
  add(
    ['Tessera at store with --workers 1, then --workers 2, each fresh, each given:'],
    [...group('workers server'), ...group('workers client')],
  );
  return out;
}

function shellQuote(text: string): string {
  if (text === '') return "''";
  if (/^[A-Za-z0-9_@%+=:,./-]+$/.test(text)) return text;
  return `'${text.replaceAll("'", "'\\''")}'`;
}

// ── Measurements ──────────────────────────────────────────────────────────────────────────────

interface Measure {
  opsPerSec: number;
  p99Ms: number | undefined;
  /** Failed operations the tool reported (the harness only). */
  errors: number;
}
type Outcome = Measure | { error: string };

interface Row {
  test: string;
  /** What the Tessera side and the baseline side are. */
  tessera: string;
  baseline: string;
  a: Outcome | undefined;
  b: Outcome | undefined;
}

/** A row's two sides: `a` Tessera, `b` the baseline. */
type Side = 'a' | 'b';
/** The order in which the servers of a pair take their turns: the baseline first. */
const SIDES: readonly Side[] = ['b', 'a'];

function isMeasure(o: Outcome | undefined): o is Measure {
  return o !== undefined && !('error' in o);
}

/** One redis-benchmark run; its tests by name (SET, GET). */
/** The better of two measurements of one test: the higher throughput (an error loses). */
function bestOf(held: Outcome | undefined, next: Outcome): Outcome {
  if (held === undefined || 'error' in held) return next;
  if ('error' in next) return held;
  return next.opsPerSec > held.opsPerSec ? next : held;
}

async function redisBenchmark(s: Settings, port: number, pipeline: number): Promise<Map<string, Outcome>> {
  const n = pipeline === 1 ? s.nP1 : s.n;
  const args = [
    '-h',
    '127.0.0.1',
    '-p',
    String(port),
    '-t',
    'set,get',
    '-P',
    String(pipeline),
    '-c',
    String(s.clients),
    '-r',
    String(RB_KEYSPACE),
    '-d',
    String(VALUE_BYTES),
    '-n',
    String(n),
    '--csv',
  ];
  record('client', 'redis-benchmark', args, port);
  const run = await exec('redis-benchmark', args, s.timeoutMs);
  const results = new Map<string, Outcome>();
  const failure = run.timedOut
    ? `timed out after ${s.timeoutMs / 1000} s`
    : run.code !== 0
      ? `exit ${run.code}: ${run.stderr.trim().slice(-300)}`
      : undefined;
  if (failure === undefined) {
    for (const [name, m] of parseBenchmarkCsv(run.stdout)) results.set(name, m);
  }
  for (const name of ['SET', 'GET']) {
    if (!results.has(name))
      results.set(name, { error: failure ?? `no ${name} line in redis-benchmark's output` });
  }
  return results;
}

/**
 * redis-benchmark --csv: a header line ("test","rps",…) then one line per test. Version 7 prints
 * avg/min/p50/p95/p99/max latency columns in ms; older versions print only rps (p99 then unknown).
 */
function parseBenchmarkCsv(text: string): Map<string, Measure> {
  const results = new Map<string, Measure>();
  let columns: string[] = ['test', 'rps'];
  for (const raw of text.split(/\r?\n|\r/)) {
    const cells = [...raw.matchAll(/"([^"]*)"/g)].map((m) => m[1]);
    if (cells.length < 2) continue;
    if (cells[0] === 'test') {
      columns = cells;
      continue;
    }
    const at = (name: string) => columns.indexOf(name);
    const rps = Number(cells[at('rps')]);
    if (!Number.isFinite(rps)) continue;
    const p99 = at('p99_latency_ms') === -1 ? Number.NaN : Number(cells[at('p99_latency_ms')]);
    results.set(cells[0], { opsPerSec: rps, p99Ms: Number.isFinite(p99) ? p99 : undefined, errors: 0 });
  }
  return results;
}

/** One closed-loop run of the load harness; throughput and p99 over every operation. */
async function harness(
  s: Settings,
  port: number,
  workload: string,
  preload: boolean,
  out: string,
): Promise<Outcome> {
  const args = [
    LOAD_MAIN,
    '--port',
    String(port),
    '--workload',
    workload,
    '--keys',
    String(s.keys),
    '--value-bytes',
    String(VALUE_BYTES),
    '--connections',
    String(s.clients),
    '--pipeline',
    '1',
    '--duration',
    s.duration,
    ...(preload ? ['--load'] : []),
    '--quiet',
    '--json',
    out,
  ];
  record('client', process.execPath, args, port);
  const run = await exec(process.execPath, args, s.timeoutMs);
  if (run.timedOut) return { error: `timed out after ${s.timeoutMs / 1000} s` };
  if (run.code !== 0 && run.code !== 1)
    return { error: `exit ${run.code}: ${run.stderr.trim().slice(-300)}` };
  let report: LoadReport;
  try {
    report = JSON.parse(readFileSync(out, 'utf8')) as LoadReport;
  } catch (error) {
    return { error: `no JSON result: ${error instanceof Error ? error.message : String(error)}` };
  }
  const errors = report.totals.errors + (report.preload?.totals.errors ?? 0);
  return { opsPerSec: report.totals.opsPerSec, p99Ms: report.all.latencyUs.p99 / 1000, errors };
}

/** The embedded tinybench suite in a child process; the rows that name a baseline, with it. */
async function embedded(s: Settings, out: string): Promise<Row[]> {
  const args = [BENCH_RUN, '--only', 'embedded', '--json', out];
  record('client', process.execPath, args, undefined, `TESSERA_BENCH_MS=${s.benchMs} `);
  const run = await exec(process.execPath, args, s.timeoutMs, {
    ...process.env,
    TESSERA_BENCH_MS: String(s.benchMs),
  });
  if (run.code !== 0) {
    const error = run.timedOut ? 'timed out' : `exit ${run.code}: ${run.stderr.trim().slice(-300)}`;
    return [
      { test: 'embedded vs lmdb', tessera: 'embedded API', baseline: 'raw lmdb', a: { error }, b: { error } },
    ];
  }
  const rows = JSON.parse(readFileSync(out, 'utf8')) as BenchRow[];
  const found: Row[] = [];
  for (const r of rows) {
    if (r.baseline === undefined) continue;
    const base = rows.find((b) => b.suite === r.suite && b.name === r.baseline);
    const op = r.name.startsWith('tessera put') ? 'put' : 'get';
    found.push({
      test: `embedded, in process (${r.name.endsWith('sustained') ? `${op}, sustained` : op})`,
      tessera: r.name,
      baseline: r.baseline,
      a: { opsPerSec: r.opsPerSec, p99Ms: undefined, errors: 0 },
      b:
        base === undefined
          ? { error: 'baseline row missing' }
          : { opsPerSec: base.opsPerSec, p99Ms: undefined, errors: 0 },
    });
  }
  return found;
}

// ── The table ─────────────────────────────────────────────────────────────────────────────────

const HEADER =
  '| test | Tessera | baseline | Tessera ops/s | baseline ops/s | ratio | Tessera p99 ms | baseline p99 ms | p99 ratio |';
const ALIGN = '|---|---|---|--:|--:|--:|--:|--:|--:|';

function formatRows(rows: Row[]): string {
  const lines = [HEADER, ALIGN];
  for (const r of rows) {
    const { a, b } = r;
    const ops = (o: Outcome | undefined) =>
      o === undefined
        ? 'n/a'
        : 'error' in o
          ? 'error'
          : `${Math.round(o.opsPerSec).toLocaleString('en-US')}${o.errors > 0 ? ` (${o.errors} errors)` : ''}`;
    const p99 = (o: Outcome | undefined) => (isMeasure(o) && o.p99Ms !== undefined ? fmtMs(o.p99Ms) : '–');
    const ratio =
      isMeasure(a) && isMeasure(b) && b.opsPerSec > 0 ? `${(a.opsPerSec / b.opsPerSec).toFixed(2)}×` : '–';
    const p99Ratio =
      isMeasure(a) && isMeasure(b) && a.p99Ms !== undefined && b.p99Ms !== undefined && b.p99Ms > 0
        ? `${(a.p99Ms / b.p99Ms).toFixed(2)}×`
        : '–';
    lines.push(
      `| ${r.test} | ${r.tessera} | ${r.baseline} | ${ops(a)} | ${ops(b)} | ${ratio} | ${p99(a)} | ${p99(b)} | ${p99Ratio} |`,
    );
  }
  return lines.join('\n');
}

function fmtMs(ms: number): string {
  if (ms < 10) return ms.toFixed(3);
  if (ms < 100) return ms.toFixed(2);
  return ms.toFixed(1);
}

/** RESULTS.md with the section between the markers replaced (or inserted). */
function replaceSection(doc: string, section: string): string {
  const block = `${MARK_START}\n${section.trimEnd()}\n${MARK_END}`;
  const start = doc.indexOf(MARK_START);
  const end = doc.indexOf(MARK_END);
  if (start !== -1 && end > start) return doc.slice(0, start) + block + doc.slice(end + MARK_END.length);
  const at = doc.indexOf(INSERT_BEFORE);
  if (at !== -1) return `${doc.slice(0, at)}\n${block}\n${doc.slice(at)}`;
  return `${doc.trimEnd()}\n\n${block}\n`;
}

// ── The run ───────────────────────────────────────────────────────────────────────────────────

function log(line: string): void {
  process.stderr.write(`bench:compare: ${line}\n`);
}

function requireTools(): void {
  for (const tool of ['redis-server', 'redis-benchmark']) {
    const probe = spawnSync(tool, ['--version'], { stdio: 'ignore' });
    if (probe.error !== undefined) {
      throw new SettingError(
        `${tool} is not on PATH. Install Redis's server and tools, e.g. on Debian or Ubuntu:\n` +
          '  apt-get install -y redis-server redis-tools    (sudo apt-get … when not root)\n' +
          'or run only the parts without Redis: BENCH_COMPARE_ONLY=embedded,workers',
      );
    }
  }
}

function versionOf(tool: string): string {
  const probe = spawnSync(tool, ['--version'], { encoding: 'utf8' });
  return (probe.stdout ?? '').trim().split(/\s+/).slice(0, 3).join(' ');
}

async function main(): Promise<number> {
  let s: Settings;
  try {
    s = settings(process.env);
    if (s.sections.has('redis-benchmark') || s.sections.has('load')) requireTools();
    if (!existsSync(TESSERA_MAIN))
      throw new SettingError('dist/main.js is missing: run `npm run build` first');
  } catch (error) {
    if (!(error instanceof SettingError)) throw error;
    log(error.message);
    return 2;
  }
  const began = Date.now();
  tmpRoot = mkdtempSync(join(tmpdir(), 'tessera-bench-compare-'));
  const redisVersion =
    s.sections.has('redis-benchmark') || s.sections.has('load') ? versionOf('redis-server') : '';
  log(
    `${s.quick ? 'quick' : 'full'} run: ${redisVersion}, node ${process.version}, ${cpus().length} cores; ` +
      `redis-benchmark -n ${s.n} (-P 16) / ${s.nP1} (-P 1), harness ${s.duration} per workload on ${s.keys} keys, ` +
      `${s.clients} connections, tessera workers ${s.workers}`,
  );

  const rows: Row[] = [];
  let outputs = 0;
  const out = (name: string) => join(tmpRoot!, `${String(outputs++).padStart(3, '0')}-${name}.json`);

  if (s.sections.has('redis-benchmark') || s.sections.has('load')) {
    for (const pair of s.pairs) {
      const tessera = `${pair}, ${s.workers} worker${s.workers === 1 ? '' : 's'}`;
      const pairRows: Row[] = [];
      const rowFor = (test: string) => {
        let row = pairRows.find((r) => r.test === test);
        if (row === undefined) {
          row = { test, tessera, baseline: REDIS_LABEL[pair], a: undefined, b: undefined };
          pairRows.push(row);
        }
        return row;
      };
      // Both servers run side by side and take turns at each measurement (redis-server first), so a
      // ratio's two halves are measured seconds apart, not minutes: this shared machine's speed
      // drifts by more than the differences being measured.
      const servers: Partial<Record<Side, Server>> = {};
      const failed: Side[] = [];
      try {
        for (const side of SIDES) {
          const who = side === 'b' ? 'redis-server' : 'tessera';
          log(`${who}, durability pair '${pair}': starting`);
          const dir = join(tmpRoot, `${side === 'b' ? 'redis' : 'tessera'}-${pair}`);
          try {
            servers[side] =
              side === 'b' ? await startRedis(pair, dir) : await startTessera(pair, s.workers, dir);
          } catch (error) {
            log(error instanceof Error ? error.message : String(error));
            failed.push(side);
          }
        }
        const running = SIDES.filter((side) => servers[side] !== undefined);
        const nameOf = (side: Side) => servers[side]!.name;
        if (s.sections.has('redis-benchmark')) {
          // A warm-up run first (JIT, the keyspace's first inserts), then the best of the repeats:
          // a fresh server's first seconds and a neighbour's burst on a shared machine are not
          // the steady state either server is compared at. Both servers get the same treatment.
          for (const side of running) {
            log(`  ${nameOf(side)}: redis-benchmark -P 16 (warm-up, not measured)`);
            await redisBenchmark(s, servers[side]!.port, 16);
          }
          for (const pipeline of [16, 1]) {
            for (let repeat = 1; repeat <= s.repeats; repeat++) {
              for (const side of running) {
                log(`  ${nameOf(side)}: redis-benchmark -P ${pipeline} (${repeat} of ${s.repeats})`);
                const results = await redisBenchmark(s, servers[side]!.port, pipeline);
                for (const [name, outcome] of results) {
                  if (name !== 'SET' && name !== 'GET') continue;
                  const row = rowFor(`redis-benchmark ${name} -P ${pipeline}`);
                  row[side] = bestOf(row[side], outcome);
                }
              }
            }
          }
        }
        if (s.sections.has('load')) {
          let first = true;
          for (const workload of s.workloads) {
            const name = workload.length === 1 ? `ycsb-${workload}` : workload;
            for (const side of running) {
              log(`  ${nameOf(side)}: load harness, workload ${workload}${first ? ' (after --load)' : ''}`);
              rowFor(`load ${name}`)[side] = await harness(
                s,
                servers[side]!.port,
                workload,
                first,
                out(`${side}-${name}`),
              );
            }
            first = false;
          }
        }
        for (const side of running) {
          const server = servers[side]!;
          if (!exited(server.child)) continue;
          log(`${server.name} exited during the run:\n${readTail(server.log)}`);
          for (const r of pairRows) r[side] = { error: `${server.name} exited during the run` };
        }
        for (const side of failed) {
          if (pairRows.length === 0) rowFor('server start');
          for (const r of pairRows) r[side] = { error: 'server did not start' };
        }
      } finally {
        for (const side of SIDES) if (servers[side] !== undefined) await stop(servers[side]!);
      }
      rows.push(...pairRows);
    }
  }

  if (s.sections.has('embedded')) {
    part = 'embedded';
    log(`embedded suite (TESSERA_BENCH_MS=${s.benchMs})`);
    rows.push(...(await embedded(s, out('embedded'))));
  }

  if (s.sections.has('workers')) {
    part = 'workers';
    const row: Row = {
      test: 'load set',
      tessera: 'store, 2 workers',
      baseline: 'tessera store, 1 worker',
      a: undefined,
      b: undefined,
    };
    for (const [side, workers] of [
      ['b', 1],
      ['a', 2],
    ] as const) {
      log(`tessera store, --workers ${workers}, load harness workload set`);
      let server: Server;
      try {
        server = await startTessera('store', workers, join(tmpRoot, `tessera-workers-${workers}`));
      } catch (error) {
        log(error instanceof Error ? error.message : String(error));
        row[side] = { error: 'server did not start' };
        continue;
      }
      try {
        row[side] = await harness(s, server.port, 'set', false, out(`workers-${workers}`));
      } finally {
        await stop(server);
      }
    }
    rows.push(row);
  }

  const table = formatRows(rows);
  process.stdout.write(`${table}\n`);
  if (s.json !== undefined) writeFileSync(s.json, `${JSON.stringify(rows, null, 2)}\n`);
  const minutes = ((Date.now() - began) / 60_000).toFixed(1);
  const failed = rows.filter((r) => !isMeasure(r.a) || !isMeasure(r.b) || r.a.errors > 0 || r.b.errors > 0);
  for (const r of failed) {
    for (const [side, o] of [
      ['Tessera', r.a],
      ['baseline', r.b],
    ] as const) {
      if (o !== undefined && 'error' in o)
        log(`${r.test} (${side}: ${side === 'Tessera' ? r.tessera : r.baseline}): ${o.error}`);
    }
  }
  log(`done in ${minutes} min; ${loadNote()}`);
  if (failed.length > 0) {
    log(`${failed.length} row(s) failed or saw errors; bench/RESULTS.md left unchanged`);
    return 1;
  }
  if (s.write) {
    const doc = readFileSync(RESULTS, 'utf8');
    writeFileSync(RESULTS, replaceSection(doc, section(s, table, redisVersion, minutes)));
    log('table written to bench/RESULTS.md');
  }
  return 0;
}

function loadNote(): string {
  if (loads.length === 0) return 'no servers started';
  const min = Math.min(...loads).toFixed(1);
  const max = Math.max(...loads).toFixed(1);
  return `1-min load average ${min}–${max} as each server started (this run alone keeps ~2 busy)`;
}

function section(s: Settings, table: string, redisVersion: string, minutes: string): string {
  const date = new Date();
  const day = [date.getFullYear(), date.getMonth() + 1, date.getDate()]
    .map((n) => String(n).padStart(2, '0'))
    .join('-');
  const cpu = cpus();
  const env = settingsShown(process.env);
  return [
    `## Ratios: Tessera vs redis-server and raw lmdb (${day})`,
    '',
    `\`${env}npm run bench:compare\` (${s.quick ? 'quick' : 'full'} run, ${minutes} min; \`bench/compare.ts\`) on`,
    `${cpu.length} cores (${cpu[0]?.model.trim() ?? 'unknown CPU'}), ${Math.round(totalmem() / 2 ** 30)} GiB,`,
    `node ${process.version}, ${redisVersion}. Servers and clients share the machine (loopback);`,
    `${loadNote()}.`,
    '',
    'Each durability pair starts a fresh redis-server and a fresh Tessera (lmdb, temp directories) side',
    'by side and runs each command against one and then the other, so the two halves of a ratio are',
    'measured seconds apart. ratio = Tessera ÷ baseline ops/s (above 1: Tessera is',
    'faster); p99 ratio = Tessera ÷ baseline p99 (above 1: Tessera is slower). redis-benchmark rows:',
    `its \`--csv\` rps and p99, after one unmeasured -P 16 warm-up run, best of ${s.repeats} runs for each`,
    'server; load rows: the harness (closed loop, 50 connections, pipeline 1), p99',
    'over every operation of the run; embedded rows: tinybench ops/s in one process, no p99. Compare',
    'ratios, not absolute numbers across runs.',
    '',
    table,
    '',
    '```sh',
    ...commandListing(),
    '```',
  ].join('\n');
}

const onSignal = (signal: NodeJS.Signals) => {
  log(`${signal}: stopping servers and removing temp files`);
  cleanupNow();
  process.exit(signal === 'SIGINT' ? 130 : 143);
};
process.on('SIGINT', onSignal);
process.on('SIGTERM', onSignal);
process.on('SIGHUP', onSignal);
process.on('exit', cleanupNow);

main().then(
  (code) => {
    cleanupNow();
    process.exitCode = code;
  },
  (error: unknown) => {
    log(error instanceof Error ? (error.stack ?? error.message) : String(error));
    cleanupNow();
    process.exitCode = 1;
  },
);
