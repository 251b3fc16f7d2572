// Command-line flags of `tessera` (dist/main.js). Every flag also reads from an environment variable
// (`--data-dir` ↔ `TESSERA_DATA_DIR`); a flag given on the command line wins. Durations accept `250ms`,
// `2s`, `5m`, `1h` or a bare number of milliseconds; sizes accept `64kb`, `4mb`, `1gb` or bytes.

import { invalidInput } from '../core/errors.js';
import {
  ADMIN_TOKEN_BYTES_MIN,
  DRAIN_TIMEOUT_MS_DEFAULT,
  LATENCY_MONITOR_THRESHOLD_MS_MAX,
  SLOWLOG_LOG_SLOWER_THAN_US_DEFAULT,
  SLOWLOG_MAX_LEN_DEFAULT,
  SLOWLOG_MAX_LEN_MAX,
} from '../core/limits.js';
import { DURABILITY_NAMES } from '../core/ops.js';
import { STORE_KINDS } from '../native-bindings/kv-store.js';
import { ADMIN_BIND_DEFAULT } from './admin/server.js';
import { CLUSTER_REDIRECTS, isLoopbackHost } from './cluster-config.js';
import type { TesseraOptions } from './config.js';
import {
  checkMonitorOptions,
  type MonitorOption,
  RESP_BIND_DEFAULT,
  RESP_PORT_DEFAULT,
  TLS_AUTH_CLIENTS,
  type TlsAuthClients,
} from './resp/server.js';

type FlagKind = 'string' | 'integer' | 'duration' | 'size' | 'boolean';

interface Flag {
  name: string;
  kind: FlagKind;
  /** The TesseraOptions field it sets, if any. */
  option?: keyof TesseraOptions;
  help: string;
}

export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;

const FLAGS: Flag[] = [
  {
    name: 'data-dir',
    kind: 'string',
    option: 'dataDir',
    help: 'where lmdb / level keep their files (default ./data)',
  },
  {
    name: 'store',
    kind: 'string',
    option: 'store',
    help: `storage engine: ${STORE_KINDS.join(' | ')} (default lmdb)`,
  },
  {
    name: 'fragments',
    kind: 'integer',
    option: 'fragments',
    help: 'fragments the keyspace is cut into, 1..16384 (default 16); fixed when the data directory is created',
  },
  {
    name: 'workers',
    kind: 'integer',
    option: 'workers',
    help: 'worker threads (default: cores - 1, between 1 and 2; more rarely help: see README)',
  },
  {
    name: 'durability',
    kind: 'string',
    option: 'durability',
    help: `when writes are acknowledged: ${DURABILITY_NAMES.join(' | ')} (default store)`,
  },
  {
    name: 'node-id',
    kind: 'string',
    option: 'nodeId',
    help: 'node id, 1-255 bytes (default: kept in the data directory)',
  },
  {
    name: 'value-bytes-max',
    kind: 'size',
    option: 'valueBytesMax',
    help: 'largest value (default 4mb, at most 15mb)',
  },
  {
    name: 'max-memory',
    kind: 'size',
    option: 'maxMemoryBytes',
    help: 'memory store only: bound the memory its records take (Redis maxmemory; default 0: no bound)',
  },
  {
    name: 'max-memory-policy',
    kind: 'string',
    option: 'maxMemoryPolicy',
    help: 'at --max-memory: noeviction (refuse writes that add data; the default), allkeys-lru or volatile-lru (evict the least recently used keys, or those with a TTL; a node without peers only)',
  },
  {
    name: 'max-clock-skew',
    kind: 'duration',
    option: 'maxClockSkewMs',
    help: 'refuse timestamps further ahead of the wall clock (default 5m)',
  },
  {
    name: 'clean-interval',
    kind: 'duration',
    option: 'cleanIntervalMs',
    help: 'period of the TTL cleaner (default 30s; fragments holding no key with a TTL are skipped)',
  },
  {
    name: 'clean-keys-per-sec',
    kind: 'integer',
    option: 'cleanKeysPerSec',
    help: 'keys the TTL cleaner examines per second in each worker (default 100000)',
  },
  {
    name: 'flush-interval',
    kind: 'duration',
    option: 'flushIntervalMs',
    help: 'longest time memory-durability writes stay uncommitted (default 0: committed with the worker turn that applied them)',
  },
  {
    name: 'wal-segment-size',
    kind: 'size',
    option: 'walSegmentBytes',
    help: 'lmdb store: size of a write-ahead log segment before the next starts (default 64mb)',
  },
  {
    name: 'queue-ops-max',
    kind: 'integer',
    option: 'queueOpsMax',
    help: 'queued operations per fragment per priority before backpressure (default 8192)',
  },
  {
    name: 'background-ops-per-sec',
    kind: 'integer',
    option: 'backgroundOpsPerSec',
    help: 'background-priority operations per fragment per second (default 1000)',
  },
  {
    name: 'pool-threads',
    kind: 'integer',
    option: 'poolThreads',
    help: 'background pool threads (default 1)',
  },
  {
    name: 'pool-tasks-per-sec',
    kind: 'integer',
    option: 'poolTasksPerSec',
    help: 'background pool tasks started per second (default 200)',
  },
  {
    name: 'peers',
    kind: 'string',
    option: 'peers',
    help: 'cluster members as id@host:port (their peer ports), comma-separated; may include this node',
  },
  {
    name: 'join',
    kind: 'string',
    option: 'join',
    help: "join a running cluster through any member's peer address (host:port, comma-separated); with neither this nor --peers, --peer-port starts a one-member cluster others can join",
  },
  {
    name: 'peer-port',
    kind: 'integer',
    option: 'peerPort',
    help: "port this node listens on for peers (default: this node's entry in --peers)",
  },
  {
    name: 'peer-bind',
    kind: 'string',
    option: 'peerBind',
    help: "address the peer port listens on (default: this node's host in --peers, else 127.0.0.1)",
  },
  {
    name: 'replicas',
    kind: 'integer',
    option: 'replicas',
    help: 'copies of each fragment (default min(3, members))',
  },
  {
    name: 'cluster-secret',
    kind: 'string',
    option: 'clusterSecret',
    help: 'shared secret (at least 32 bytes) peers prove in the handshake; prefer the variable or a file',
  },
  {
    name: 'cluster-secret-file',
    kind: 'string',
    option: 'clusterSecretFile',
    help: 'file holding the cluster secret',
  },
  {
    name: 'insecure',
    kind: 'boolean',
    option: 'insecure',
    help: 'allow peers on non-loopback addresses without a cluster secret (plaintext, unauthenticated)',
  },
  {
    name: 'replication-ack',
    kind: 'string',
    option: 'replicationAck',
    help: `level a replica reaches before it acknowledges a batch: ${DURABILITY_NAMES.join(' | ')} (default store)`,
  },
  {
    name: 'replica-acks',
    kind: 'integer',
    option: 'replicaAcks',
    help: 'other replicas that must acknowledge a write before it is answered (default 0: answered once the serving replica has it)',
  },
  {
    name: 'replica-ack-timeout',
    kind: 'duration',
    option: 'replicaAckTimeoutMs',
    help: 'how long a write waits for --replica-acks before it fails with NOREPLICAS (default 5s)',
  },
  {
    name: 'down-after',
    kind: 'duration',
    option: 'downAfterMs',
    help: 'a member unreachable from a majority this long is Down (default 30s); routing avoids an unreachable member at once',
  },
  {
    name: 'max-moves-per-node',
    kind: 'integer',
    option: 'maxMovesPerNode',
    help: 'replica moves a node takes part in at once, in and out each (default 2, as Scylla and Riak)',
  },
  {
    name: 'move-rate',
    kind: 'size',
    option: 'moveRateBytesPerSec',
    help: 'bytes per second this node copies in for moves and anti-entropy repairs, shared by its workers, so clients keep their latency (default 32mb, at least 64kb; 0: unlimited)',
  },
  {
    name: 'cluster-redirects',
    kind: 'string',
    option: 'clusterRedirects',
    help: `a key another node serves: ${CLUSTER_REDIRECTS.join(' | ')} (default forward: served through that node, for any client; moved: -MOVED as Redis Cluster answers, for cluster-mode clients)`,
  },
  {
    name: 'drain-warn-interval',
    kind: 'duration',
    option: 'drainWarnIntervalMs',
    help: 'how often a fragment whose handoff cannot complete is logged (default 10s); it is never dropped on a timer',
  },
  {
    name: 'anti-entropy-interval',
    kind: 'duration',
    option: 'antiEntropyIntervalMs',
    help: 'mean period of anti-entropy rounds per fragment and peer, each spread ±half (default 60s)',
  },
  {
    name: 'anti-entropy-rate',
    kind: 'integer',
    option: 'antiEntropyKeysPerSec',
    help: 'keys per second this node compares in routine anti-entropy rounds, shared by its workers (default 5000; 0: unlimited); catch-ups and copies are not paced',
  },
  {
    name: 'drain-timeout',
    kind: 'duration',
    help: 'on shutdown, wait this long for replicas to acknowledge every write (default 5s; 0 skips)',
  },
  { name: 'port', kind: 'integer', help: 'RESP (Redis protocol) port; 0 picks a free one (default 6380)' },
  {
    name: 'bind',
    kind: 'string',
    help: 'address the RESP port listens on (default 127.0.0.1: this machine only)',
  },
  {
    name: 'requirepass',
    kind: 'string',
    help: 'clients must AUTH with this password first (also TESSERA_PASSWORD); prefer the variable: flags show in ps',
  },
  {
    name: 'worker-ports',
    kind: 'integer',
    help: 'each worker also serves the Redis protocol on its own port, BASE + its index (0: any free ports; CLUSTER SLOTS names them), for the keys it owns (others are answered -MOVED); default: off',
  },
  {
    name: 'worker-ports-host',
    kind: 'string',
    help: 'the host -MOVED names for the worker ports (default: --bind, or 127.0.0.1 when that is a wildcard)',
  },
  {
    name: 'tls-port',
    kind: 'integer',
    help: 'also serve the Redis protocol over TLS on this port (default: none); needs --tls-cert-file and --tls-key-file',
  },
  {
    name: 'tls-cert-file',
    kind: 'string',
    help: "the TLS port's (and the peer mesh's) certificate chain (PEM)",
  },
  { name: 'tls-key-file', kind: 'string', help: "the TLS port's (and the peer mesh's) private key (PEM)" },
  {
    name: 'tls-ca-cert-file',
    kind: 'string',
    help: 'CA certificates (PEM) that client certificates, and with --tls-cluster peer certificates, must chain to',
  },
  {
    name: 'tls-cluster',
    kind: 'boolean',
    help: 'encrypt the peer mesh with mutually verified TLS (Redis: tls-cluster yes); needs --tls-cert-file, --tls-key-file and --tls-ca-cert-file on every node',
  },
  {
    name: 'tls-client-cert-file',
    kind: 'string',
    help: 'with --tls-cluster: the certificate this node presents when it dials a peer (default: --tls-cert-file)',
  },
  { name: 'tls-client-key-file', kind: 'string', help: 'the private key of --tls-client-cert-file' },
  {
    name: 'tls-only',
    kind: 'boolean',
    help: 'serve the Redis protocol over TLS only: no plain port (Redis: port 0 with a tls-port)',
  },
  {
    name: 'tls-auth-clients',
    kind: 'string',
    help: 'client certificates: yes (required, the default, as in Redis) | optional | no; yes and optional need --tls-ca-cert-file',
  },
  {
    name: 'admin-port',
    kind: 'integer',
    help: 'admin HTTP port: /health, /placement, /cluster, /cluster/members, /cluster/events, /metrics (Prometheus), a status page; 0 picks a free one (default: none)',
  },
  {
    name: 'admin-bind',
    kind: 'string',
    help: 'address the admin port listens on (default 127.0.0.1: this machine only; any other needs --admin-token)',
  },
  {
    name: 'admin-token',
    kind: 'string',
    help: 'bearer token the admin port requires for cluster changes (POST /cluster/...); none: changes are refused',
  },
  {
    name: 'backup-dir',
    kind: 'string',
    help: 'where TESSERA.BACKUP writes backups (one new directory each); unset: the command is refused',
  },
  {
    name: 'slowlog-log-slower-than',
    kind: 'integer',
    help: `SLOWLOG keeps commands that take at least this many µs of the main thread; negative: none, 0: all (default ${SLOWLOG_LOG_SLOWER_THAN_US_DEFAULT}, Redis's)`,
  },
  {
    name: 'slowlog-max-len',
    kind: 'integer',
    help: `entries SLOWLOG keeps, newest first (default ${SLOWLOG_MAX_LEN_DEFAULT}, Redis's; at most ${SLOWLOG_MAX_LEN_MAX})`,
  },
  {
    name: 'latency-monitor-threshold',
    kind: 'integer',
    help: `LATENCY records commands that take at least this many ms of the main thread; 0: none (default 0, Redis's; at most ${LATENCY_MONITOR_THRESHOLD_MS_MAX})`,
  },
  { name: 'log-level', kind: 'string', help: `log level: ${LOG_LEVELS.join(' | ')} (default info)` },
  { name: 'help', kind: 'boolean', help: 'print this help and exit' },
  { name: 'version', kind: 'boolean', help: 'print the version and exit' },
];

/** The flags of the RESP server's SLOWLOG and LATENCY settings. */
const MONITOR_FLAGS: Record<MonitorOption, string> = {
  slowlogLogSlowerThanUs: '--slowlog-log-slower-than',
  slowlogMaxLen: '--slowlog-max-len',
  latencyMonitorThresholdMs: '--latency-monitor-threshold',
};

export interface CliArgs {
  options: TesseraOptions;
  /** Replication drain on shutdown (cluster nodes), in ms. */
  drainTimeoutMs: number;
  resp: {
    port: number;
    bind: string;
    password: string | undefined;
    backupDir: string | undefined;
    slowlogLogSlowerThanUs: number | undefined;
    slowlogMaxLen: number | undefined;
    latencyMonitorThresholdMs: number | undefined;
    workerPorts: { base: number; host: string | undefined } | undefined;
  };
  /** The TLS listener's port and the PEM files to read at start, when --tls-port is given. */
  tls:
    | {
        port: number;
        certFile: string;
        keyFile: string;
        caFile: string | undefined;
        authClients: TlsAuthClients;
        only: boolean;
      }
    | undefined;
  /** The PEM files of the peer mesh's TLS (read at start), when --tls-cluster is given. */
  peerTls:
    | { certFile: string; keyFile: string; caFile: string; clientCertFile?: string; clientKeyFile?: string }
    | undefined;
  /** The admin HTTP server, when --admin-port is given. */
  admin: { port: number; bind: string; token: string | undefined } | undefined;
  logLevel: (typeof LOG_LEVELS)[number];
  help: boolean;
  /** The flags whose values came from their environment variables, not the command line. */
  fromEnvironment: ReadonlySet<string>;
  version: boolean;
}

const DURATION_UNITS_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };
const SIZE_UNITS: Record<string, number> = { b: 1, kb: 1024, mb: 1024 ** 2, gb: 1024 ** 3 };

export function parseDuration(text: string): number {
  const m = /^(\d+)(ms|s|m|h)?$/.exec(text.trim());
  if (m === null) throw invalidInput(`"${text}" is not a duration (e.g. 250ms, 2s, 5m, or milliseconds)`);
  return Number(m[1]) * DURATION_UNITS_MS[m[2] ?? 'ms'];
}

export function parseSize(text: string): number {
  const m = /^(\d+)(b|kb|mb|gb)?$/i.exec(text.trim());
  if (m === null) throw invalidInput(`"${text}" is not a size (e.g. 64kb, 4mb, or bytes)`);
  return Number(m[1]) * SIZE_UNITS[(m[2] ?? 'b').toLowerCase()];
}

function parseInteger(text: string): number {
  if (!/^-?\d+$/.test(text.trim())) throw invalidInput(`"${text}" is not an integer`);
  return Number(text);
}

export const envName = (flag: string): string => `TESSERA_${flag.toUpperCase().replace(/-/g, '_')}`;

function convert(flag: Flag, raw: string): string | number | boolean {
  try {
    switch (flag.kind) {
      case 'string':
        return raw;
      case 'integer':
        return parseInteger(raw);
      case 'duration':
        return parseDuration(raw);
      case 'size':
        return parseSize(raw);
      case 'boolean':
        if (raw === '' || raw === 'true' || raw === '1') return true;
        if (raw === 'false' || raw === '0') return false;
        throw invalidInput(`"${raw}" is not true or false`);
    }
  } catch (err) {
    throw invalidInput(`--${flag.name}: ${(err as Error).message.replace(/^invalid input: /, '')}`);
  }
}

/** Parses argv (without node and script) and the environment into node options. */
export function parseCliArgs(argv: readonly string[], env: NodeJS.ProcessEnv): CliArgs {
  const values = new Map<string, string | number | boolean>();
  const fromEnvironment = new Set<string>();
  for (const flag of FLAGS) {
    const fromEnv = env[envName(flag.name)];
    if (fromEnv !== undefined && flag.kind !== 'boolean') {
      values.set(flag.name, convert(flag, fromEnv));
      fromEnvironment.add(flag.name);
    }
  }
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (!arg.startsWith('--')) throw invalidInput(`unexpected argument "${arg}" (see --help)`);
    const eq = arg.indexOf('=');
    const name = arg.slice(2, eq === -1 ? undefined : eq);
    const flag = FLAGS.find((f) => f.name === name);
    if (flag === undefined) throw invalidInput(`unknown flag --${name} (see --help)`);
    let raw: string;
    if (eq !== -1) raw = arg.slice(eq + 1);
    else if (flag.kind === 'boolean') raw = '';
    else if (i + 1 < argv.length) raw = argv[++i];
    else throw invalidInput(`--${name} needs a value`);
    values.set(name, convert(flag, raw));
    fromEnvironment.delete(name);
  }
  const options: Record<string, unknown> = {};
  for (const flag of FLAGS) {
    if (flag.option !== undefined && values.has(flag.name)) options[flag.option] = values.get(flag.name);
  }
  const port = (values.get('port') as number | undefined) ?? RESP_PORT_DEFAULT;
  if (port < 0 || port > 65535) throw invalidInput(`--port must be in 0..65535, got ${port}`);
  const password = (values.get('requirepass') as string | undefined) ?? env.TESSERA_PASSWORD;
  if (password === '') throw invalidInput('--requirepass must not be empty');
  const backupDir = values.get('backup-dir') as string | undefined;
  if (backupDir === '') throw invalidInput('--backup-dir must not be empty');
  const monitors = {
    slowlogLogSlowerThanUs: values.get('slowlog-log-slower-than') as number | undefined,
    slowlogMaxLen: values.get('slowlog-max-len') as number | undefined,
    latencyMonitorThresholdMs: values.get('latency-monitor-threshold') as number | undefined,
  };
  checkMonitorOptions(monitors, (option) => MONITOR_FLAGS[option]);
  const workerPortsBase = values.get('worker-ports') as number | undefined;
  if (workerPortsBase !== undefined && (workerPortsBase < 0 || workerPortsBase > 65535))
    throw invalidInput(`--worker-ports must be in 0..65535, got ${workerPortsBase}`);
  const workerPortsHost = values.get('worker-ports-host') as string | undefined;
  if (workerPortsHost !== undefined && workerPortsBase === undefined)
    throw invalidInput('--worker-ports-host needs --worker-ports');
  const resp = {
    port,
    bind: (values.get('bind') as string | undefined) ?? RESP_BIND_DEFAULT,
    password,
    backupDir,
    workerPorts: workerPortsBase === undefined ? undefined : { base: workerPortsBase, host: workerPortsHost },
    ...monitors,
  };
  const tls = tlsArgs(values);
  const clustered =
    options.peers !== undefined || options.join !== undefined || options.peerPort !== undefined;
  const peerTls = peerTlsArgs(values, clustered);
  const adminPort = values.get('admin-port') as number | undefined;
  if (adminPort !== undefined && (adminPort < 0 || adminPort > 65535))
    throw invalidInput(`--admin-port must be in 0..65535, got ${adminPort}`);
  const token = values.get('admin-token') as string | undefined;
  if (token !== undefined && Buffer.byteLength(token) < ADMIN_TOKEN_BYTES_MIN)
    throw invalidInput(`--admin-token must be at least ${ADMIN_TOKEN_BYTES_MIN} bytes`);
  const adminBind = (values.get('admin-bind') as string | undefined) ?? ADMIN_BIND_DEFAULT;
  const admin = adminPort === undefined ? undefined : { port: adminPort, bind: adminBind, token };
  const logLevel = (values.get('log-level') ?? 'info') as CliArgs['logLevel'];
  if (!LOG_LEVELS.includes(logLevel))
    throw invalidInput(`--log-level must be one of ${LOG_LEVELS.join(', ')}`);
  // The port cluster clients are sent to (CLUSTER SLOTS): the TLS one when there is no other.
  if (clustered) (options as TesseraOptions).clientPort = tls?.only ? tls.port : port;
  return {
    options: options as TesseraOptions,
    drainTimeoutMs: (values.get('drain-timeout') as number | undefined) ?? DRAIN_TIMEOUT_MS_DEFAULT,
    resp,
    tls,
    peerTls,
    admin,
    logLevel,
    help: values.get('help') === true,
    version: values.get('version') === true,
    fromEnvironment,
  };
}

/**
 * A node does not serve its admin port beyond this machine without a token guarding cluster
 * changes (the `tessera cluster` commands that only ask a node need none).
 */
export function checkAdminExposure(admin: { bind: string; token: string | undefined }): void {
  if (admin.token === undefined && !isLoopbackHost(admin.bind)) {
    throw invalidInput(
      `--admin-bind ${admin.bind} exposes the admin port beyond this machine: give --admin-token (or TESSERA_ADMIN_TOKEN)`,
    );
  }
}

/**
 * A refusal of the options, in the command line's words: each option name in `message` (as the
 * embedded API names it, `valueBytesMax`) becomes its flag (`--value-bytes-max`), with the
 * environment variable when that is where the value came from.
 */
export function inFlagTerms(message: string, fromEnvironment: ReadonlySet<string>): string {
  return message.replace(/\b[a-z][A-Za-z]*\b/g, (word, at: number, whole: string) => {
    const flag = FLAGS.find((f) => f.option === word);
    // A one-word option ("store") is a flag only where it opens the message or a clause after ': '.
    const opensClause = at === 0 || whole.slice(at - 2, at) === ': ';
    if (flag === undefined || (!opensClause && word === word.toLowerCase())) return word;
    const source = fromEnvironment.has(flag.name) ? ` (from ${envName(flag.name)})` : '';
    return `--${flag.name}${source}`;
  });
}

function tlsArgs(values: Map<string, string | number | boolean>): CliArgs['tls'] {
  const port = values.get('tls-port') as number | undefined;
  const certFile = values.get('tls-cert-file') as string | undefined;
  const keyFile = values.get('tls-key-file') as string | undefined;
  const caFile = values.get('tls-ca-cert-file') as string | undefined;
  const authClients = (values.get('tls-auth-clients') ?? 'yes') as TlsAuthClients;
  const only = values.get('tls-only') === true;
  if (port === undefined) {
    // The certificate files also serve the peer mesh's TLS.
    const files =
      values.get('tls-cluster') === true ? [] : ['tls-cert-file', 'tls-key-file', 'tls-ca-cert-file'];
    const stray = [...files, 'tls-auth-clients', 'tls-only'].find((f) => values.has(f));
    if (stray !== undefined) throw invalidInput(`--${stray} is given without --tls-port`);
    return undefined;
  }
  if (port < 0 || port > 65535) throw invalidInput(`--tls-port must be in 0..65535, got ${port}`);
  if (certFile === undefined || keyFile === undefined)
    throw invalidInput('--tls-port needs --tls-cert-file and --tls-key-file');
  if (!TLS_AUTH_CLIENTS.includes(authClients))
    throw invalidInput(`--tls-auth-clients must be one of ${TLS_AUTH_CLIENTS.join(', ')}`);
  if (authClients !== 'no' && caFile === undefined) {
    throw invalidInput(
      `--tls-auth-clients ${authClients} needs --tls-ca-cert-file to verify client certificates (or --tls-auth-clients no)`,
    );
  }
  if (only && values.has('port'))
    throw invalidInput('--port and --tls-only: with --tls-only there is no plain port');
  return { port, certFile, keyFile, caFile, authClients, only };
}

function peerTlsArgs(values: Map<string, string | number | boolean>, clustered: boolean): CliArgs['peerTls'] {
  const clientCertFile = values.get('tls-client-cert-file') as string | undefined;
  const clientKeyFile = values.get('tls-client-key-file') as string | undefined;
  if (values.get('tls-cluster') !== true) {
    const stray = ['tls-client-cert-file', 'tls-client-key-file'].find((f) => values.has(f));
    if (stray !== undefined) throw invalidInput(`--${stray} is given without --tls-cluster`);
    return undefined;
  }
  if (!clustered) throw invalidInput("--tls-cluster needs --peers (the cluster's members)");
  const certFile = values.get('tls-cert-file') as string | undefined;
  const keyFile = values.get('tls-key-file') as string | undefined;
  const caFile = values.get('tls-ca-cert-file') as string | undefined;
  if (certFile === undefined || keyFile === undefined || caFile === undefined) {
    throw invalidInput(
      '--tls-cluster needs --tls-cert-file, --tls-key-file and --tls-ca-cert-file: each peer verifies the other against the CA',
    );
  }
  if ((clientCertFile === undefined) !== (clientKeyFile === undefined))
    throw invalidInput('--tls-client-cert-file and --tls-client-key-file go together');
  return { certFile, keyFile, caFile, clientCertFile, clientKeyFile };
}

export function helpText(): string {
  const lines = [
    'Usage: tessera [flags]',
    '',
    'Starts a Tessera node. Every flag can also be set with an environment variable, shown after',
    'it; the flag wins. Durations: 250ms, 2s, 5m, 1h or milliseconds. Sizes: 64kb, 4mb or bytes.',
    '',
  ];
  for (const flag of FLAGS) {
    const value = flag.kind === 'boolean' ? '' : ` <${flag.kind === 'string' ? 'value' : flag.kind}>`;
    const env = flag.kind === 'boolean' ? '' : `  [${envName(flag.name)}]`;
    lines.push(`  --${flag.name}${value}${env}`, `      ${flag.help}`);
  }
  lines.push(
    '',
    'SIGINT, SIGTERM or the SHUTDOWN command shuts the node down gracefully: admitted writes finish and are fsynced.',
    '',
    'Subcommands ask a running node through its admin port:',
    '  tessera status --admin-port <port> [--admin-bind <host>]     health: workers, fragments, peers (exit 1 if degraded or unhealthy)',
    '  tessera placement --admin-port <port> [--admin-bind <host>]  every fragment: slots, replicas, serving replica',
    '  tessera cluster status|members|events --admin-port <port>    membership: members, their states, events (tessera cluster --help)',
  );
  return lines.join('\n');
}
