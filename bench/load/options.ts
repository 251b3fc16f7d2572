// The load harness's command line: every flag, its default, its bounds, and the help text.

import { parseArgs } from 'node:util';
import { KEY_INDEX_MAX } from './request-writer.js';
import {
  DISTRIBUTIONS,
  type Distribution,
  MIXED_READ_RATIO_DEFAULT,
  OP_INSERT,
  OP_SCAN,
  SCAN_LENGTH_MAX_DEFAULT,
  WORKLOAD_NAMES,
  type WorkloadName,
  workloadSpec,
} from './workloads.js';
import { ZIPFIAN_THETA_DEFAULT } from './zipfian.js';

/** Connections per run: each is a socket and a slot array; past this the client is the bottleneck. */
export const CONNECTIONS_MAX = 10_000;
/** Requests in flight per connection (redis-benchmark's -P); Tessera admits 1024 per connection. */
export const PIPELINE_MAX = 1024;
/** The largest value written: a request is encoded whole into one buffer. */
export const VALUE_BYTES_MAX = 64 * 1024 * 1024;
/** Pipeline of the --load phase: deep enough that loading is not round-trip bound. */
export const LOAD_PIPELINE = 64;
/** Connections of the --load phase, at most. */
export const LOAD_CONNECTIONS_MAX = 16;
/** Keys a --cluster run may have: each key's primary is looked up once, before the run. */
export const CLUSTER_KEYS_MAX = 10_000_000;

export interface LoadOptions {
  host: string;
  port: number;
  password: string | undefined;
  workload: WorkloadName;
  distribution: Distribution;
  theta: number;
  readRatio: number;
  keys: number;
  valueBytes: number;
  keyPrefix: string;
  scanLengthMax: number;
  connections: number;
  pipeline: number;
  /** Exactly one of durationMs and ops is set. */
  durationMs: number | undefined;
  ops: number | undefined;
  /** Open loop at this many operations per second; undefined: closed loop. */
  rate: number | undefined;
  load: boolean;
  seed: number;
  timeoutMs: number;
  json: string | undefined;
  svg: string | undefined;
  quiet: boolean;
  /** Each key to the primary CLUSTER SLOTS names for its slot (bench/load/cluster.ts). */
  cluster: boolean;
}

export const HELP = `Usage: npm run load -- [options]
       node .build/bench/load/main.js [options]

Drives a Redis-protocol server (Tessera or redis-server) over many connections and reports latency
percentiles per operation, throughput per second and errors.

Target
  --host HOST            server address (default 127.0.0.1)
  --port PORT            server port (default 6380, Tessera's; redis-server's is 6379)
  --password PASS        AUTH with this password on every connection (or set REDISCLI_AUTH)
  --cluster              send each key to the primary CLUSTER SLOTS (asked at --host/--port) names
                         for its slot: Tessera's worker ports, or a Redis Cluster. Connections,
                         --ops and --rate are shared out by the keys each primary serves. Not with
                         workloads that insert or scan (d, e); at most ${CLUSTER_KEYS_MAX} keys

Workload
  --workload W           a b c d e f (YCSB core workloads), set, get, mixed (default a)
                           a  50% GET, 50% SET            b  95% GET, 5% SET       c  100% GET
                           d  95% GET, 5% insert, latest  e  95% scan, 5% insert
                           f  50% GET, 50% read-modify-write (GET then SET, one operation)
                           set / get  100% SET / GET      mixed  --read-ratio GET, the rest SET
                         A scan (e) is one MGET of 1..--scan-length-max consecutive keys: Redis has
                         no range read over string keys, and SCAN MATCH walks the whole keyspace.
  --distribution D       uniform, zipfian or latest (default: zipfian for a b c e f, latest for d,
                         uniform for set get mixed)
  --theta X              zipfian skew (default ${ZIPFIAN_THETA_DEFAULT}, YCSB's)
  --read-ratio X         share of GETs in mixed, 0..1 (default ${MIXED_READ_RATIO_DEFAULT})
  --keys N               records: keys <prefix>0000000000 .. N-1 (default 100000; 10k, 1m accepted)
  --value-bytes N        bytes per value (default 100; 1kb accepted)
  --key-prefix S         key prefix (default "load:")
  --scan-length-max N    longest scan (default ${SCAN_LENGTH_MAX_DEFAULT}, YCSB's maxscanlength)
  --load                 first SET every key, with its own progress and summary (${LOAD_PIPELINE} deep
                         pipelines on up to ${LOAD_CONNECTIONS_MAX} connections)

Load shape
  --connections N        connections (default 50, at most ${CONNECTIONS_MAX})
  --pipeline N           requests in flight per connection (default 1, at most ${PIPELINE_MAX})
  --duration T           run this long: 500ms, 10s, 2m (default 10s)
  --ops N                or run exactly N operations
  --rate R               open loop: R operations per second in all, each due at its own intended
                         time; latency counts from that time, so queueing in the client shows
                         (coordinated omission corrected). Without --rate: closed loop, as fast as
                         replies allow, latency from the send.
  --timeout T            a request unanswered this long fails its connection (default 10s)
  --seed N               seed of every random choice (default 1)

Output
  --json FILE            write the result as JSON (config, totals, percentiles, per-second series,
                         errors)
  --svg FILE             write a chart: latency by percentile, throughput per second
  --quiet                no progress line and no table; only the final line
  -h, --help             this text

The last line is "errors: 0" or "FAILED: <n> errors (<kinds>)"; the exit status is 1 when any
operation failed, 2 when the options are wrong or the server cannot be reached.
`;

export class UsageError extends Error {
  override name = 'UsageError';
}

/** Parses argv (without node and the script) into options; throws UsageError. Undefined: --help. */
export function parseOptions(argv: readonly string[], env: NodeJS.ProcessEnv = {}): LoadOptions | undefined {
  let parsed: ReturnType<typeof parse>;
  try {
    parsed = parse(argv);
  } catch (error) {
    throw new UsageError(error instanceof Error ? error.message : String(error));
  }
  const v = parsed.values;
  if (v.help === true) return undefined;
  if (parsed.positionals.length > 0) throw new UsageError(`unexpected argument '${parsed.positionals[0]}'`);
  const workload = oneOf('--workload', v.workload ?? 'a', WORKLOAD_NAMES);
  const readRatio = fraction('--read-ratio', v['read-ratio'], MIXED_READ_RATIO_DEFAULT);
  const distribution =
    v.distribution === undefined
      ? workloadSpec(workload, readRatio).distribution
      : oneOf('--distribution', v.distribution, DISTRIBUTIONS);
  if (v.duration !== undefined && v.ops !== undefined)
    throw new UsageError('give --duration or --ops, not both');
  const ops = v.ops === undefined ? undefined : count('--ops', v.ops, 1, Number.MAX_SAFE_INTEGER);
  const theta = Number(v.theta ?? ZIPFIAN_THETA_DEFAULT);
  if (!(theta > 0 && theta < 100))
    throw new UsageError(`--theta must be a positive number, not '${v.theta}'`);
  const cluster = v.cluster === true;
  if (cluster) {
    const kinds = workloadSpec(workload, readRatio).mix.map(([kind]) => kind);
    if (kinds.includes(OP_INSERT) || kinds.includes(OP_SCAN))
      throw new UsageError(`--cluster does not take workload ${workload}: it inserts or scans`);
  }
  return {
    host: v.host ?? '127.0.0.1',
    port: count('--port', v.port ?? '6380', 1, 65535),
    password: v.password ?? (env.REDISCLI_AUTH || undefined),
    workload,
    distribution,
    theta,
    readRatio,
    keys: count('--keys', v.keys ?? '100000', 1, cluster ? CLUSTER_KEYS_MAX : KEY_INDEX_MAX / 2),
    valueBytes: size('--value-bytes', v['value-bytes'] ?? '100'),
    keyPrefix: v['key-prefix'] ?? 'load:',
    scanLengthMax: count(
      '--scan-length-max',
      v['scan-length-max'] ?? String(SCAN_LENGTH_MAX_DEFAULT),
      1,
      100_000,
    ),
    connections: count('--connections', v.connections ?? '50', 1, CONNECTIONS_MAX),
    pipeline: count('--pipeline', v.pipeline ?? '1', 1, PIPELINE_MAX),
    durationMs: ops === undefined ? duration('--duration', v.duration ?? '10s') : undefined,
    ops,
    rate: v.rate === undefined ? undefined : count('--rate', v.rate, 1, 100_000_000),
    load: v.load === true,
    seed: count('--seed', v.seed ?? '1', 0, 2 ** 32 - 1),
    timeoutMs: duration('--timeout', v.timeout ?? '10s'),
    json: v.json,
    svg: v.svg,
    quiet: v.quiet === true,
    cluster: v.cluster === true,
  };
}

function parse(argv: readonly string[]) {
  const text = { type: 'string' } as const;
  return parseArgs({
    args: [...argv],
    strict: true,
    allowPositionals: true,
    options: {
      host: text,
      port: text,
      password: text,
      workload: text,
      distribution: text,
      theta: text,
      'read-ratio': text,
      keys: text,
      'value-bytes': text,
      'key-prefix': text,
      'scan-length-max': text,
      connections: text,
      pipeline: text,
      duration: text,
      ops: text,
      rate: text,
      timeout: text,
      seed: text,
      json: text,
      svg: text,
      load: { type: 'boolean' },
      quiet: { type: 'boolean' },
      cluster: { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
  });
}

function oneOf<T extends string>(flag: string, value: string, allowed: readonly T[]): T {
  const found = allowed.find((a) => a === value.toLowerCase());
  if (found === undefined)
    throw new UsageError(`${flag} must be one of ${allowed.join(', ')}, not '${value}'`);
  return found;
}

const COUNT_SUFFIXES: Record<string, number> = { '': 1, k: 1e3, m: 1e6, g: 1e9 };
const SIZE_SUFFIXES: Record<string, number> = { '': 1, b: 1, kb: 1024, mb: 1024 ** 2 };
const DURATION_SUFFIXES: Record<string, number> = { '': 1000, ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/** An integer in [min, max], with an optional k / m / g multiplier. */
function count(flag: string, text: string, min: number, max: number): number {
  const n = scaled(flag, text, COUNT_SUFFIXES);
  if (!Number.isSafeInteger(n) || n < min || n > max) {
    throw new UsageError(`${flag} must be an integer from ${min} to ${max}, not '${text}'`);
  }
  return n;
}

function size(flag: string, text: string): number {
  const n = scaled(flag, text, SIZE_SUFFIXES);
  if (!Number.isSafeInteger(n) || n < 0 || n > VALUE_BYTES_MAX) {
    throw new UsageError(`${flag} must be a size from 0 to ${VALUE_BYTES_MAX} bytes, not '${text}'`);
  }
  return n;
}

/** Milliseconds from `250ms`, `10s`, `2m`, `1h`, or a number of seconds. */
function duration(flag: string, text: string): number {
  const ms = scaled(flag, text, DURATION_SUFFIXES);
  if (!(ms >= 1) || !Number.isFinite(ms))
    throw new UsageError(`${flag} must be a duration like 10s, not '${text}'`);
  return Math.round(ms);
}

function fraction(flag: string, text: string | undefined, fallback: number): number {
  if (text === undefined) return fallback;
  const x = Number(text);
  if (!(x >= 0 && x <= 1)) throw new UsageError(`${flag} must be a number from 0 to 1, not '${text}'`);
  return x;
}

function scaled(flag: string, text: string, suffixes: Record<string, number>): number {
  const match = /^([0-9]+(?:\.[0-9]+)?)([a-z]*)$/i.exec(text.trim());
  const unit = match === null ? undefined : suffixes[match[2].toLowerCase()];
  if (match === null || unit === undefined) throw new UsageError(`${flag}: cannot read '${text}'`);
  return Math.round(Number(match[1]) * unit * 1000) / 1000;
}
