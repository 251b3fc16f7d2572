// The RESP server: Tessera's Redis face on the main thread. Accepts clients (loopback by default),
// authenticates them when a password is set (compared in constant time), and answers the
// server-wide questions commands ask: INFO, CONFIG GET, DBSIZE.

import { readFile } from 'node:fs/promises';
import { createServer, type Server, type Socket } from 'node:net';
import { arch, hostname, platform, release } from 'node:os';
import { createServer as createTlsServer, type Server as TlsServer } from 'node:tls';
import type { Logger } from 'pino';
import { invalidInput } from '../../core/errors.js';
import { slotOfRange } from '../../core/keyspace.js';
import {
  EVICTION_SAMPLE_KEYS,
  KEY_COUNT_PAGE_KEYS,
  KEY_COUNT_REUSE_MS_DEFAULT,
  KEY_COUNT_REUSE_PER_COUNT_MS,
  LATENCY_MONITOR_THRESHOLD_MS_MAX,
  RESP_CLIENTS_MAX,
  SLOWLOG_LOG_SLOWER_THAN_US_DEFAULT,
  SLOWLOG_MAX_LEN_DEFAULT,
  SLOWLOG_MAX_LEN_MAX,
} from '../../core/limits.js';
import { DURABILITY_NAMES, Durability } from '../../core/ops.js';
import { RATE_SAMPLE_INTERVAL_MS, RateWindow } from '../../core/rate-window.js';
import { RESP_BULK_BYTES_MAX, type RespCommand } from '../../core/resp-parser.js';
import type { RespWriter } from '../../core/resp-writer.js';
import type { RelayReply, RelayRequest } from '../../threads/messages.js';
import { PortCounter } from '../../threads/port-counters.js';
import { peerSummaries, refusesWrites } from '../health-summary.js';
import type { KeyRouter } from '../key-router.js';
import { listenOn } from '../listen.js';
import type { Health, Tessera } from '../node.js';
import { type CommandSpec, commandStatsOfTable, keyArguments } from './commands.js';
import { ReplyFlusher, RespClients, RespConnection, type RespSocket } from './connection.js';
import { type RespHost, RespPassword, type RespSettings } from './host.js';
import { LatencyMonitor } from './latency-monitor.js';
import { monitorLine } from './monitor.js';
import { ScanCursors } from './scan-cursors.js';
import { SlowLog } from './slowlog.js';

/**
 * The Redis version whose replies Tessera matches (reported by INFO and HELLO): the parity tests
 * compare every reply with this redis-server's.
 */
export const REDIS_VERSION = '7.0.15';
export const RESP_PORT_DEFAULT = 6380;
export const RESP_BIND_DEFAULT = '127.0.0.1';

/** The RESP server's counters at one moment (INFO, the admin server's /metrics). */
export interface RespStatsSnapshot {
  connectedClients: number;
  blockedClients: number;
  connectionsReceived: number;
  rejectedConnections: number;
  commandsProcessed: number;
  errorReplies: number;
  keyspaceHits: number;
  keyspaceMisses: number;
  netInputBytes: number;
  netOutputBytes: number;
  /** The last key count (INFO keyspace), if one was made. */
  keys: { keys: number; expires: number } | undefined;
  /** Pub/Sub: channels, distinct patterns and shard channels with a subscriber at this node. */
  pubsubChannels: number;
  pubsubPatterns: number;
  pubsubShardChannels: number;
  /** Pub/Sub messages not sent to a peer that had fallen behind (once per peer). */
  pubsubPeerMessagesDropped: number;
}

interface KeyCount {
  keys: number;
  expires: number;
  /** Mean time left of the keys with a deadline, at the count (Redis's avg_ttl is an estimate too). */
  avgTtlMs: number;
  atMs: number;
  tookMs: number;
}

/** The counters of INFO's Stats section, under Redis's names there. */
export class RespStats {
  commandsProcessed = 0;
  netInputBytes = 0;
  netOutputBytes = 0;
  /** Reads that found a live key, and those that did not (MGET and EXISTS count each key). */
  keyspaceHits = 0;
  keyspaceMisses = 0;
  /** Error replies of connections that have closed (live ones are summed when INFO asks). */
  closedErrorReplies = 0;

  lookup(found: boolean): void {
    if (found) this.keyspaceHits++;
    else this.keyspaceMisses++;
  }
}

export interface RespServerOptions {
  port?: number;
  bind?: string;
  /** Clients must AUTH with this password first (Redis `requirepass`). */
  password?: string;
  logger: Logger;
  /** Package version, for INFO. */
  version?: string;
  /**
   * Shuts the node down (the SHUTDOWN command); `now` skips waiting for replicas. Without it, SHUTDOWN
   * is refused: an embedded node is closed by its application.
   */
  onShutdown?: (how: { now: boolean }) => void;
  /** How long INFO reuses a key count before it starts a new one (default KEY_COUNT_REUSE_MS_DEFAULT). */
  keyCountReuseMs?: number;
  /** Where TESSERA.BACKUP puts backups; without it the command is refused. */
  backupDir?: string;
  /** µs a command must take to be kept in SLOWLOG (negative: none; default 10 000, Redis's). */
  slowlogLogSlowerThanUs?: number;
  /** Entries SLOWLOG keeps (default 128, Redis's). */
  slowlogMaxLen?: number;
  /** Milliseconds a command must take to be a LATENCY sample (default 0: none, as Redis's). */
  latencyMonitorThresholdMs?: number;
  /** A second listener speaking TLS (Redis's tls-port), beside the plain one. */
  tls?: RespTlsOptions;
  /**
   * Each worker thread also serves RESP on its own port, for the keys of its fragments: worker i on
   * `base` + i (0: any free port each). `host` is what `-MOVED` names (default: the bind address,
   * or 127.0.0.1 when that is a wildcard).
   */
  workerPorts?: { base: number; host?: string };
}

/** Client certificates: required and verified (yes), verified when given (optional), not asked (no). */
export const TLS_AUTH_CLIENTS = ['yes', 'no', 'optional'] as const;
export type TlsAuthClients = (typeof TLS_AUTH_CLIENTS)[number];

export interface RespTlsOptions {
  port: number;
  /** PEM: the server's certificate chain and private key. */
  cert: string | Buffer;
  key: string | Buffer;
  /** PEM: the CAs client certificates must chain to (needed unless authClients is 'no'). */
  ca?: string | Buffer;
  authClients: TlsAuthClients;
  /** No plain listener at all (Redis's `port 0` beside a tls-port): CONFIG GET port answers 0. */
  only?: boolean;
}

/** How long a TLS client may take to finish its handshake. */
export const TLS_HANDSHAKE_TIMEOUT_MS = 10_000;

export class RespServer implements RespHost {
  readonly cursors = new ScanCursors();
  readonly stats = new RespStats();
  /** Per-command calls, time and latency (INFO commandstats, latencystats). */
  readonly commandStats = commandStatsOfTable();
  /** Error replies by code, every connection's writers counting here (INFO errorstats). */
  readonly errorCodes = new Map<string, number>();
  readonly slowlog: SlowLog;
  readonly latencyMonitor: LatencyMonitor;
  /** Connections in MONITOR mode. */
  readonly monitors = new MonitorSet((count) => this.node.dispatcher.monitorsChanged(count));
  readonly logger: Logger;
  private readonly commandRate: RateWindow;
  private readonly inputRate: RateWindow;
  private readonly outputRate: RateWindow;
  private readonly rateTimer: NodeJS.Timeout;
  private readonly server: Server;
  private readonly clients = new RespClients();
  private readonly flusher = new ReplyFlusher();
  private readonly password: RespPassword | undefined;
  private readonly startedAtMs = Date.now();
  /** The last count: live keys, those with a deadline and their mean time left, when and how long it took. */
  private keyCount: KeyCount | undefined;

  /** The keys the last count found (DBSIZE, INFO keyspace) and when it finished; undefined before one. */
  get lastKeyCount(): { keys: number; atMs: number } | undefined {
    const k = this.keyCount;
    return k === undefined ? undefined : { keys: k.keys, atMs: k.atMs };
  }
  private counting: Promise<number> | undefined;
  private port = 0;
  private host = '';
  private tlsPort = 0;
  private tlsHost = '';
  private backups = 0;
  private readonly tlsServer: TlsServer | undefined;

  private constructor(
    readonly node: Tessera,
    private readonly options: RespServerOptions,
  ) {
    this.logger = options.logger;
    checkMonitorOptions(options);
    this.slowlog = new SlowLog(
      options.slowlogLogSlowerThanUs ?? SLOWLOG_LOG_SLOWER_THAN_US_DEFAULT,
      options.slowlogMaxLen ?? SLOWLOG_MAX_LEN_DEFAULT,
    );
    this.latencyMonitor = new LatencyMonitor(options.latencyMonitorThresholdMs ?? 0);
    this.password = options.password === undefined ? undefined : new RespPassword(options.password);
    this.server = createServer((socket) => this.accept(socket));
    const tls = options.tls;
    if (tls !== undefined) {
      if (tls.authClients !== 'no' && tls.ca === undefined) {
        throw invalidInput('TLS client authentication needs the CA certificates to verify clients with');
      }
      this.tlsServer = createTlsServer(
        {
          cert: tls.cert,
          key: tls.key,
          ca: tls.ca,
          requestCert: tls.authClients !== 'no',
          rejectUnauthorized: tls.authClients === 'yes',
          minVersion: 'TLSv1.2',
          handshakeTimeout: TLS_HANDSHAKE_TIMEOUT_MS,
        },
        (socket) => this.accept(socket),
      );
      // A client that fails its handshake (no or a bad certificate, not TLS at all) only loses its
      // own connection.
      this.tlsServer.on('tlsClientError', (err: Error, socket) =>
        this.logger.info({ err: err.message, client: socket.remoteAddress }, 'TLS handshake failed'),
      );
    }
    const now = Date.now();
    this.commandRate = new RateWindow(now, 0);
    this.inputRate = new RateWindow(now, 0);
    this.outputRate = new RateWindow(now, 0);
    this.rateTimer = setInterval(() => this.sampleRates(), RATE_SAMPLE_INTERVAL_MS);
    // A sampling timer does not keep the process alive.
    this.rateTimer.unref();
  }

  private sampleRates(): void {
    const now = Date.now();
    const ports = this.node.dispatcher.portCounters;
    const of = (field: PortCounter) => ports?.total(field) ?? 0;
    this.commandRate.sample(now, this.stats.commandsProcessed + of(PortCounter.CommandsProcessed));
    this.inputRate.sample(now, this.stats.netInputBytes + of(PortCounter.NetInputBytes));
    this.outputRate.sample(now, this.stats.netOutputBytes + of(PortCounter.NetOutputBytes));
  }

  /** Starts listening; resolves once the port is bound. */
  static async listen(node: Tessera, options: RespServerOptions): Promise<RespServer> {
    if (options.password !== undefined && options.password.length === 0) {
      throw invalidInput('the RESP password must not be empty');
    }
    const server = new RespServer(node, options);
    const bind = options.bind ?? RESP_BIND_DEFAULT;
    server.workerPortsHost = options.workerPorts?.host ?? (WILDCARD_HOSTS.has(bind) ? '127.0.0.1' : bind);
    if (options.tls?.only !== true) {
      const { host, port } = await listenOn(server.server, options.port ?? RESP_PORT_DEFAULT, bind);
      server.host = host;
      server.port = port;
    }
    try {
      if (server.tlsServer !== undefined) {
        const tlsAddress = await listenOn(server.tlsServer, options.tls!.port, bind);
        server.tlsHost = tlsAddress.host;
        server.tlsPort = tlsAddress.port;
      }
      const workerPorts = options.workerPorts;
      if (workerPorts !== undefined) {
        const ports = await node.dispatcher.openWorkerPorts(
          {
            base: workerPorts.base,
            bind,
            host: server.workerPortsHost,
            password: options.password,
          },
          {
            run: (request, push) => server.runRelayed(request, push),
            endSession: (worker, session) => server.endSession(worker, session),
            endSessionsOf: (worker) => server.endSessionsOf(worker),
            monitor: (lines) => server.showLines(lines),
          },
        );
        node.cluster?.announceWorkerPorts(ports, node.dispatcher.groupCount);
      }
    } catch (err) {
      await server.close();
      throw err;
    }
    return server;
  }

  get settings(): RespSettings {
    return this.node.settings;
  }

  get keys(): KeyRouter {
    return this.node.dispatcher;
  }

  get main(): RespServer {
    return this;
  }

  memoryFull(): boolean {
    return this.node.memoryFull();
  }

  unsubscribeAll(conn: RespConnection): void {
    this.node.pubsub.registry.unsubscribeAll(conn);
  }

  /**
   * `--cluster-redirects moved`: a command whose keys all hash to one slot that another node serves
   * is answered `-MOVED slot host:port` (the primary CLUSTER SLOTS names), as Redis Cluster answers
   * it, so a cluster-mode client goes to that node and follows a fragment that moved. Keys in several
   * slots still run here (Tessera serves them across fragments where Redis answers CROSSSLOT), and a
   * slot no reachable node serves now is forwarded as in `forward` mode. True when it answered.
   */
  redirected(conn: RespConnection, spec: CommandSpec, cmd: RespCommand, w: RespWriter): boolean {
    const node = this.node;
    const cluster = node.cluster;
    if (cluster === undefined || !cluster.config.redirectsMoved) return false;
    const keys = keyArguments(spec, cmd);
    if (keys === undefined) return false;
    const [first, end, step] = keys;
    const slot = slotOfRange(cmd.bufs[first], cmd.starts[first], cmd.ends[first]);
    for (let i = first + step; i <= end; i += step) {
      if (slotOfRange(cmd.bufs[i], cmd.starts[i], cmd.ends[i]) !== slot) return false;
    }
    const fragment = node.dispatcher.keyspace.fragmentOfSlot(slot);
    const member = cluster.servingMember(fragment);
    if (member === -1 || member === cluster.config.selfIndex) return false;
    // READONLY: a read of a fragment this node holds a copy of is served here, as a Redis replica does.
    if (conn.readReplica && spec.flags.includes('readonly') && node.dispatcher.holds(fragment)) return false;
    const host = cluster.config.addresses[member]?.host;
    const port = cluster.mesh.clientPortOf(member);
    if (host === undefined || port <= 0) return false;
    w.errorCode('MOVED', `${slot} ${host}:${port}`);
    return true;
  }

  runsHere(): boolean {
    return true;
  }

  runElsewhere(_conn: RespConnection, spec: CommandSpec): boolean {
    throw new Error(`${spec.name} was sent elsewhere from the main port`);
  }

  get address(): { host: string; port: number } {
    return { host: this.host, port: this.port };
  }

  /** The TLS listener's port, when there is one. */
  get tlsAddress(): { host: string; port: number } | undefined {
    return this.tlsServer === undefined ? undefined : { host: this.tlsHost, port: this.tlsPort };
  }

  /** Where TESSERA.BACKUP writes, if the operator allowed it. */
  get backupDir(): string | undefined {
    return this.options.backupDir;
  }

  /** Numbers this server's backups, so two in one millisecond get two directories. */
  nextBackupNumber(): number {
    return ++this.backups;
  }

  /** Starts the node's shutdown for SHUTDOWN; false when this server has no way to (embedded). */
  shutdown(how: { now: boolean }): boolean {
    if (this.options.onShutdown === undefined) return false;
    this.options.onShutdown(how);
    return true;
  }

  get requiresAuth(): boolean {
    return this.password !== undefined;
  }

  passwordMatches(password: Uint8Array): boolean {
    return this.password?.matches(password) ?? false;
  }

  connections(): RespConnection[] {
    return [...this.clients.values()];
  }

  forget(conn: RespConnection): void {
    this.monitors.delete(conn);
    this.node.pubsub.registry.unsubscribeAll(conn);
    if (this.clients.delete(conn)) this.stats.closedErrorReplies += conn.errorReplies;
  }

  /**
   * MONITOR's feed: `cmd`, run by `from`, as Redis shows it — `+<seconds.micros> [0 <addr>] "arg" …`,
   * arguments quoted and escaped, passwords redacted, administrative commands not shown.
   */
  showToMonitors(from: RespConnection, cmd: RespCommand, spec: CommandSpec): void {
    const line = monitorLine(from.remoteAddress, cmd, spec);
    if (line === undefined) return;
    for (const monitor of this.monitors) monitor.sendLine(line);
  }

  get monitored(): boolean {
    return this.monitors.size !== 0;
  }

  /** MONITOR's feed of what a worker port ran (its lines made there). */
  showLines(lines: readonly string[]): void {
    for (const monitor of this.monitors) for (const line of lines) monitor.sendLine(line);
  }

  flushSoon(conn: RespConnection): void {
    this.flusher.soon(conn);
  }

  /** Worker-port clients' sessions (CommandSpec.needs `session`), by `sessionKey`. */
  private readonly sessions = new Map<string, { conn: RespConnection; socket: RelaySocket }>();
  /** The host `-MOVED` and the slot map name for the workers' RESP ports. */
  workerPortsHost = '';

  /** The workers' RESP ports by worker index, when they are open. */
  get workerPorts(): readonly number[] | undefined {
    return this.node.dispatcher.workerPortList;
  }

  /**
   * Runs a command a worker port handed over (CommandSpec.needs) as that client's, with its
   * protocol, authentication and name: on a connection of its own, or for a session (subscriptions)
   * on the one kept for that client, whose pushes go to `push`; resolves with the reply.
   */
  runRelayed(request: RelayRequest, push: (bytes: Uint8Array) => void): Promise<RelayReply> {
    const key = sessionKey(request.worker, request.session);
    let relayed = request.session === 0 ? undefined : this.sessions.get(key);
    if (relayed === undefined) {
      const socket = new RelaySocket(
        request.remoteIp,
        request.remotePort,
        request.session === 0 ? undefined : push,
      );
      relayed = { socket, conn: new RespConnection(this, socket, this.clients.nextClientId()) };
      if (request.session !== 0) this.sessions.set(key, relayed);
    }
    const { conn, socket } = relayed;
    conn.protocol = request.protocol;
    conn.authenticated = request.authenticated;
    conn.name = request.name;
    conn.durability = request.durability;
    conn.replicaAcks = request.replicaAcks;
    conn.writtenFragments.clear();
    for (const fragment of request.written) conn.writtenFragments.add(fragment);
    conn.writtenSinceStamp = request.writtenSinceStamp;
    conn.relayedFromWorker = request.worker;
    const reply = socket.reply(conn);
    socket.deliver(encodeRelayed(request.args));
    return reply;
  }

  /** A worker-port client's session ends (the client went away): its subscriptions go with it. */
  endSession(worker: number, session: number): void {
    const key = sessionKey(worker, session);
    const relayed = this.sessions.get(key);
    if (relayed === undefined) return;
    this.sessions.delete(key);
    relayed.conn.close();
  }

  /** Every session of `worker`'s clients ends (the worker restarted: its clients are gone). */
  endSessionsOf(worker: number): void {
    for (const key of [...this.sessions.keys()]) {
      if (key.startsWith(`${worker}:`)) this.endSession(worker, Number(key.slice(key.indexOf(':') + 1)));
    }
  }

  /** Stops accepting, closes every client, and resolves once the listener is closed. */
  async close(): Promise<void> {
    if (this.workerPorts !== undefined) this.node.cluster?.announceWorkerPorts([], 0);
    for (const relayed of this.sessions.values()) relayed.conn.close();
    this.sessions.clear();
    await this.node.dispatcher.closeWorkerPorts();
    const closing = [this.server, this.tlsServer].map(
      (listener) =>
        new Promise<void>((resolve) => {
          if (listener === undefined || !listener.listening) resolve();
          else listener.close(() => resolve());
        }),
    );
    clearInterval(this.rateTimer);
    for (const conn of this.clients.values()) conn.close();
    await Promise.all(closing);
  }

  private accept(socket: Socket): void {
    this.clients.accept(this, socket);
  }

  /**
   * Live keys, counted by paging through every fragment (keys only). INFO's counts run at Background
   * priority, behind client traffic; DBSIZE's at Default. A count already running is shared.
   */
  countKeys(priority: 'default' | 'background' = 'default'): Promise<number> {
    if (this.counting !== undefined) return this.counting;
    const count = async (): Promise<number> => {
      const startedMs = Date.now();
      let n = 0;
      let expires = 0;
      let ttlSumMs = 0;
      let cursor: string | undefined;
      do {
        const page = await this.node.scan({
          cursor,
          limit: KEY_COUNT_PAGE_KEYS,
          keysOnly: true,
          expiry: true,
          priority,
          // In a cluster: the keys this node serves, so the nodes' counts add up (redis-cli --cluster).
          servedHere: true,
        });
        n += page.entries.length;
        const nowMs = Date.now();
        for (const e of page.entries) {
          if (e.expiresAtMs! === 0) continue;
          expires++;
          ttlSumMs += Math.max(0, e.expiresAtMs! - nowMs);
        }
        cursor = page.cursor;
      } while (cursor !== undefined);
      const atMs = Date.now();
      const avgTtlMs = expires === 0 ? 0 : Math.round(ttlSumMs / expires);
      this.keyCount = { keys: n, expires, avgTtlMs, atMs, tookMs: atMs - startedMs };
      return n;
    };
    this.counting = count().finally(() => {
      this.counting = undefined;
    });
    return this.counting;
  }

  /** CONFIG GET's view: the Redis settings clients and tools ask for, as this node runs them. */
  configView(): Map<string, string> {
    const s = this.node.settings;
    return new Map([
      ['port', String(this.port)],
      ['tls-port', String(this.tlsPort)],
      ['tls-auth-clients', this.options.tls?.authClients ?? 'yes'],
      ['bind', this.host],
      ['databases', '1'],
      ['maxclients', String(RESP_CLIENTS_MAX)],
      ['slowlog-log-slower-than', String(this.slowlog.slowerThanUs)],
      ['slowlog-max-len', String(this.slowlog.maxLen)],
      ['latency-monitor-threshold', String(this.latencyMonitor.thresholdMs)],
      ['maxmemory', String(s.maxMemoryBytes)],
      ['maxmemory-policy', s.maxMemoryPolicy],
      ['maxmemory-samples', String(EVICTION_SAMPLE_KEYS)],
      ['appendonly', s.durability === Durability.Memory ? 'no' : 'yes'],
      // The durability levels' Redis counterparts (README "Durability").
      [
        'appendfsync',
        s.durability === Durability.Stable ? 'always' : s.durability === Durability.Store ? 'everysec' : 'no',
      ],
      ['save', ''],
      ['timeout', '0'],
      ['tcp-keepalive', '0'],
      ['cluster-enabled', this.node.cluster === undefined ? 'no' : 'yes'],
      ['proto-max-bulk-len', String(Math.min(RESP_BULK_BYTES_MAX, s.valueBytesMax))],
      ['dir', s.store === 'memory' ? '' : s.dataDir],
      ['tessera-store', s.store],
      ['tessera-durability', DURABILITY_NAMES[s.durability]],
      ['tessera-fragments', String(s.fragments)],
    ]);
  }

  /** INFO text for the requested sections (all when none). */
  async info(sections: string[]): Promise<string> {
    const all = sections.includes('all') || sections.includes('everything');
    const wants = (name: string) =>
      all ||
      sections.length === 0 ||
      sections.includes(name) ||
      (sections.includes('default') && name !== 'tessera');
    const parts: string[] = [];
    // One health report serves every section that reads it (each asks every worker).
    let health: Promise<Health> | undefined;
    const healthOnce = () => {
      health ??= this.node.health();
      return health;
    };
    if (wants('server')) parts.push(this.serverSection());
    if (wants('clients')) {
      const s = this.statsSnapshot();
      parts.push(
        section('Clients', [
          ['connected_clients', s.connectedClients],
          ['maxclients', RESP_CLIENTS_MAX],
          ['blocked_clients', s.blockedClients],
        ]),
      );
    }
    if (wants('memory')) parts.push(this.memorySection());
    if (wants('persistence')) parts.push(await this.persistenceSection(healthOnce));
    if (wants('stats')) parts.push(await this.statsSection(healthOnce));
    if (wants('replication')) parts.push(await this.replicationSection(healthOnce));
    if (wants('cpu')) parts.push(await cpuSection());
    // As Redis's: commandstats and latencystats only when named or with `all`; errorstats by default.
    // With worker ports, each port's figures as it last published them are added to this port's.
    const portStats = this.node.dispatcher.workerPortStats;
    const commandStats =
      portStats.length === 0 ? this.commandStats : this.commandStats.plus(portStats.map((p) => p.commands));
    if (all || sections.includes('commandstats'))
      parts.push(section('Commandstats', commandStats.commandRows()));
    if (wants('errorstats')) {
      const errors = new Map(this.errorCodes);
      for (const port of portStats)
        for (const [code, n] of port.errors) errors.set(code, (errors.get(code) ?? 0) + n);
      const rows = [...errors].map(([code, n]): [string, string] => [`errorstat_${code}`, `count=${n}`]);
      parts.push(section('Errorstats', rows));
    }
    if (wants('cluster')) {
      const cluster = this.node.cluster;
      const enabled = cluster !== undefined || this.workerPorts !== undefined;
      const rows: Array<[string, string | number]> = [['cluster_enabled', enabled ? 1 : 0]];
      if (cluster !== undefined) {
        // Tessera's own: fragments short of replicas (re-replication brings it to 0), moves in
        // flight, and the fragments this node holds a copy of and serves (the coordinator evens out
        // who serves).
        const here = cluster.fragmentsHere();
        rows.push(['cluster_fragments_under_replicated', cluster.underReplicated()]);
        rows.push(['cluster_moves_in_flight', cluster.movesInFlight()]);
        rows.push(['cluster_fragments_held', here.held]);
        rows.push(['cluster_fragments_serving', here.serving]);
      }
      parts.push(section('Cluster', rows));
    }
    if (wants('keyspace')) parts.push(await this.keyspaceSection());
    if (all || sections.includes('latencystats'))
      parts.push(section('Latencystats', commandStats.latencyRows()));
    if (wants('tessera')) parts.push(await this.tesseraSection(healthOnce));
    return parts.join('\r\n');
  }

  private serverSection(): string {
    const uptimeS = Math.floor((Date.now() - this.startedAtMs) / 1000);
    return section('Server', [
      ['redis_version', REDIS_VERSION],
      ['tessera_version', this.options.version ?? 'unknown'],
      ['redis_mode', this.node.cluster === undefined ? 'standalone' : 'cluster'],
      ['os', `${platform()} ${release()} ${arch()}`],
      ['arch_bits', 64],
      ['process_id', process.pid],
      ['tcp_port', this.port],
      ['uptime_in_seconds', uptimeS],
      ['uptime_in_days', Math.floor(uptimeS / 86400)],
      ['executable', process.argv[1] ?? ''],
      ['hostname', hostname()],
    ]);
  }

  private memorySection(): string {
    const m = process.memoryUsage();
    return section('Memory', [
      ['used_memory', m.heapUsed + m.external],
      ['used_memory_human', humanBytes(m.heapUsed + m.external)],
      ['used_memory_rss', m.rss],
      ['used_memory_rss_human', humanBytes(m.rss)],
      ['used_memory_dataset', this.node.memoryBytes()],
      ['maxmemory', this.node.settings.maxMemoryBytes],
      ['maxmemory_human', humanBytes(this.node.settings.maxMemoryBytes)],
      ['maxmemory_policy', this.node.settings.maxMemoryPolicy],
      ['mem_allocator', 'libc'],
    ]);
  }

  /**
   * The fields monitoring tools read to alert on a failing disk. `appendonly` follows CONFIG GET's;
   * `aof_last_write_status` is err while any fragment's last commit failed (Redis: its last AOF write).
   */
  private async persistenceSection(healthOf: () => Promise<Health>): Promise<string> {
    const health = await healthOf();
    return section('Persistence', [
      ['loading', 0],
      ['aof_enabled', this.node.settings.durability === Durability.Memory ? 0 : 1],
      ['aof_last_write_status', health.fragments.some((f) => f.commitFailures > 0) ? 'err' : 'ok'],
    ]);
  }

  /**
   * The counters INFO's Stats and Clients sections and the admin server's metrics report: the main
   * port's and the worker ports' together.
   */
  statsSnapshot(): RespStatsSnapshot {
    const ports = this.node.dispatcher.portCounters;
    const of = (field: PortCounter) => ports?.total(field) ?? 0;
    const stats = this.stats;
    let errorReplies = stats.closedErrorReplies;
    let blockedClients = 0;
    for (const c of this.clients.values()) {
      errorReplies += c.errorReplies;
      if (c.isBlocked) blockedClients++;
    }
    const keys = this.keyCount;
    const pubsub = this.node.pubsub.registry;
    return {
      connectedClients: this.clients.size + of(PortCounter.ConnectedClients),
      blockedClients,
      connectionsReceived: this.clients.received + of(PortCounter.ConnectionsReceived),
      rejectedConnections: this.clients.rejected + of(PortCounter.RejectedConnections),
      commandsProcessed: stats.commandsProcessed + of(PortCounter.CommandsProcessed),
      errorReplies: errorReplies + of(PortCounter.ErrorReplies),
      keyspaceHits: stats.keyspaceHits + of(PortCounter.KeyspaceHits),
      keyspaceMisses: stats.keyspaceMisses + of(PortCounter.KeyspaceMisses),
      netInputBytes: stats.netInputBytes + of(PortCounter.NetInputBytes),
      netOutputBytes: stats.netOutputBytes + of(PortCounter.NetOutputBytes),
      keys: keys === undefined ? undefined : { keys: keys.keys, expires: keys.expires },
      pubsubChannels: pubsub.channelCount,
      pubsubPatterns: pubsub.patternCount,
      pubsubShardChannels: pubsub.shardChannelCount,
      pubsubPeerMessagesDropped: this.node.cluster?.pubsub.dropped ?? 0,
    };
  }

  private async statsSection(healthOf: () => Promise<Health>): Promise<string> {
    const health = await healthOf();
    const shed = health.fragments.reduce((n, f) => n + f.shed[0] + f.shed[1] + f.shed[2], 0);
    const s = this.statsSnapshot();
    const kbps = (bytesPerSecond: number) => (bytesPerSecond / 1024).toFixed(2);
    return section('Stats', [
      ['total_connections_received', s.connectionsReceived],
      ['total_commands_processed', s.commandsProcessed],
      ['instantaneous_ops_per_sec', Math.round(this.commandRate.perSecond())],
      ['total_net_input_bytes', s.netInputBytes],
      ['total_net_output_bytes', s.netOutputBytes],
      ['instantaneous_input_kbps', kbps(this.inputRate.perSecond())],
      ['instantaneous_output_kbps', kbps(this.outputRate.perSecond())],
      ['rejected_connections', s.rejectedConnections],
      ['expired_keys', health.fragments.reduce((n, f) => n + f.expiredSwept, 0)],
      ['evicted_keys', health.memory.evictedKeys],
      ['keyspace_hits', s.keyspaceHits],
      ['keyspace_misses', s.keyspaceMisses],
      ['pubsub_channels', s.pubsubChannels],
      ['pubsub_patterns', s.pubsubPatterns],
      ['pubsubshard_channels', s.pubsubShardChannels],
      ['total_error_replies', s.errorReplies],
      // Tessera's own: writes applied and reads served by the fragment actors, operations shed.
      ['fragment_writes_applied', health.fragments.reduce((n, f) => n + f.writes, 0)],
      ['fragment_reads_in_workers', health.fragments.reduce((n, f) => n + f.reads, 0)],
      ['shed_operations', shed],
      ['pubsub_peer_messages_dropped', s.pubsubPeerMessagesDropped],
    ]);
  }

  private async keyspaceSection(): Promise<string> {
    // The first INFO waits for a count; later ones answer with the last count at once and start a
    // new one in the background once it is old (INFO must stay quick for monitoring, whatever the
    // keyspace's size: a count reads every key).
    const known = this.keyCount;
    if (known === undefined) await this.countKeys('background');
    else if (
      Date.now() - known.atMs >=
      Math.max(
        this.options.keyCountReuseMs ?? KEY_COUNT_REUSE_MS_DEFAULT,
        known.tookMs * KEY_COUNT_REUSE_PER_COUNT_MS,
      )
    ) {
      this.countKeys('background').catch((err: Error) =>
        this.logger.warn({ err: err.message }, 'key count for INFO failed'),
      );
    }
    const { keys, expires, avgTtlMs } = this.keyCount!;
    return section(
      'Keyspace',
      keys === 0 ? [] : [['db0', `keys=${keys},expires=${expires},avg_ttl=${avgTtlMs}`]],
    );
  }

  /**
   * Redis's role fields, then one line per peer and per replication sender (fragment → peer): its
   * state, backlog and lag, so an operator can watch replication catch up.
   */
  private async replicationSection(healthOf: () => Promise<Health>): Promise<string> {
    const rows: Array<[string, string | number]> = [['role', 'master']];
    const cluster = (await healthOf()).cluster;
    if (cluster === undefined) {
      rows.push(['connected_slaves', 0]);
      return section('Replication', rows);
    }
    const senders = cluster.senders;
    const peers = peerSummaries(cluster);
    const connected = peers.filter((p) => p.connected);
    rows.push(['connected_slaves', connected.length]);
    // Redis's per-replica lines, for tools that read them: offset counts the writes it acknowledged.
    const config = this.node.cluster!.config;
    for (const [i, p] of connected.entries()) {
      const m = config.members.indexOf(p.id);
      const port = this.node.cluster!.mesh.clientPortOf(m);
      const ip = config.addresses[m]?.host ?? '';
      rows.push([
        `slave${i}`,
        `ip=${ip},port=${port},state=online,offset=${p.acked},lag=${Math.floor(p.lagMs / 1000)}`,
      ]);
    }
    rows.push(
      ['replication_backlog_ops', peers.reduce((n, p) => n + p.backlog, 0)],
      ['replication_lag_ms', peers.reduce((n, p) => Math.max(n, p.lagMs), 0)],
      ['anti_entropy_pool_pages', cluster.antiEntropyPoolPages],
    );
    for (const p of peers) {
      rows.push([
        `peer_${p.id}`,
        `state=${p.connected ? 'online' : 'offline'},senders=${p.senders},backlog=${p.backlog},lag_ms=${p.lagMs},` +
          `acked=${p.acked},bytes_sent=${p.bytesSent},replication_bytes_sent=${p.replicationBytesSent},` +
          `anti_entropy_bytes_sent=${p.antiEntropyBytesSent}`,
      ]);
    }
    for (const s of senders) {
      rows.push([
        `sender_${s.fragment}_${s.peer}`,
        `state=${s.state},session=${s.sessionId},buffered=${s.buffered},in_flight=${s.inFlight},lag_ms=${s.lagMs},` +
          `acked=${s.opsAcked},rounds=${s.reconcileRounds},resets=${s.resets}`,
      ]);
    }
    return section('Replication', rows);
  }

  private async tesseraSection(healthOf: () => Promise<Health>): Promise<string> {
    const health = await healthOf();
    const s = this.node.settings;
    const rows: Array<[string, string | number]> = [
      ['node_id', health.nodeId],
      ['store', s.store],
      ['data_dir', s.store === 'memory' ? '' : s.dataDir],
      ['fragments', s.fragments],
      ['workers', health.workers.length],
      ['durability', health.durability],
      ['store_commit_failures_in_a_row', health.fragments.reduce((n, f) => Math.max(n, f.commitFailures), 0)],
      ['store_refusing_writes', refusesWrites(health) ? 1 : 0],
    ];
    for (const w of health.workers) {
      rows.push([`worker${w.index}`, `state=${w.state},restarts=${w.restarts},pending=${w.pending}`]);
    }
    return section('Tessera', rows);
  }
}

export type MonitorOption = 'slowlogLogSlowerThanUs' | 'slowlogMaxLen' | 'latencyMonitorThresholdMs';

/**
 * Checks the SLOWLOG and LATENCY settings (those given); `named` words each as its user knows it
 * (the command line passes its flags).
 */
export function checkMonitorOptions(
  options: Pick<RespServerOptions, MonitorOption>,
  named: (option: MonitorOption) => string = (option) => option,
): void {
  const slowerThanUs = options.slowlogLogSlowerThanUs;
  if (slowerThanUs !== undefined && !Number.isSafeInteger(slowerThanUs)) {
    throw invalidInput(
      `${named('slowlogLogSlowerThanUs')} must be an integer (negative: none), got ${slowerThanUs}`,
    );
  }
  const inRange = (option: MonitorOption, max: number) => {
    const value = options[option];
    if (value !== undefined && (!Number.isInteger(value) || value < 0 || value > max))
      throw invalidInput(`${named(option)} must be an integer in 0..${max}, got ${value}`);
  };
  inRange('slowlogMaxLen', SLOWLOG_MAX_LEN_MAX);
  inRange('latencyMonitorThresholdMs', LATENCY_MONITOR_THRESHOLD_MS_MAX);
}

/**
 * INFO cpu, from the process's own times: the whole process (every thread: main, workers, pool),
 * no children (Tessera forks none), and the main thread alone (Linux: its /proc task's utime and
 * stime; left out where that cannot be read). Seconds with six decimals, as Redis prints them.
 */
async function cpuSection(): Promise<string> {
  const { user, system } = process.cpuUsage();
  const rows: Array<[string, string]> = [
    ['used_cpu_sys', cpuSeconds(system / 1e6)],
    ['used_cpu_user', cpuSeconds(user / 1e6)],
    ['used_cpu_sys_children', cpuSeconds(0)],
    ['used_cpu_user_children', cpuSeconds(0)],
  ];
  const main = await mainThreadCpu();
  if (main !== undefined) {
    rows.push(['used_cpu_sys_main_thread', cpuSeconds(main.systemS)]);
    rows.push(['used_cpu_user_main_thread', cpuSeconds(main.userS)]);
  }
  return section('CPU', rows);
}

const cpuSeconds = (s: number): string => s.toFixed(6);

/** Linux's clock tick for /proc times (USER_HZ, fixed at 100 by the kernel's ABI). */
const PROC_TICKS_PER_SECOND = 100;

/** The main thread's CPU time, from /proc/self/task/<pid>/stat (the main thread's task id is the pid). */
async function mainThreadCpu(): Promise<{ userS: number; systemS: number } | undefined> {
  let stat: string;
  try {
    stat = await readFile(`/proc/self/task/${process.pid}/stat`, 'latin1');
  } catch {
    return undefined;
  }
  // Fields after the command name, which is in parentheses and may hold spaces: utime and stime are
  // the stat's 14th and 15th fields, the 12th and 13th after the name.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const utime = Number(fields[11]);
  const stime = Number(fields[12]);
  if (!Number.isFinite(utime) || !Number.isFinite(stime)) return undefined;
  return { userS: utime / PROC_TICKS_PER_SECOND, systemS: stime / PROC_TICKS_PER_SECOND };
}

function section(title: string, rows: Array<[string, string | number]>): string {
  return `# ${title}\r\n${rows.map(([k, v]) => `${k}:${v}\r\n`).join('')}`;
}

/** INFO's `*_human` figures: mebibytes with two decimals. */
function humanBytes(bytes: number): string {
  return `${(bytes / 1048576).toFixed(2)}M`;
}

/** Bind addresses that are not an address a client can be sent to. */
const WILDCARD_HOSTS = new Set(['0.0.0.0', '::', '']);

/** A command's arguments as a RESP array, as its client sent it. */
function encodeRelayed(args: readonly Uint8Array[]): Buffer {
  const parts: Uint8Array[] = [Buffer.from(`*${args.length}\r\n`, 'latin1')];
  for (const arg of args) parts.push(Buffer.from(`$${arg.length}\r\n`, 'latin1'), arg, CRLF);
  return Buffer.concat(parts);
}

const CRLF = Buffer.from('\r\n', 'latin1');

/** A worker-port client's session, named by its worker and the worker's session number. */
const sessionKey = (worker: number, session: number): string => `${worker}:${session}`;

/** The MONITOR clients, telling the worker ports how many there are as it changes. */
class MonitorSet extends Set<RespConnection> {
  constructor(private readonly changed: (count: number) => void) {
    super();
  }

  override add(conn: RespConnection): this {
    super.add(conn);
    this.changed(this.size);
    return this;
  }

  override delete(conn: RespConnection): boolean {
    const had = super.delete(conn);
    if (had) this.changed(this.size);
    return had;
  }
}

/**
 * The main thread's end of a relayed command's connection: the connection reads the command from it
 * and writes its reply to it; the reply is whole once the connection has no command left in flight.
 * A session's (`push` given) lives on: what it writes between commands (Pub/Sub messages) is pushed
 * to its client.
 */
class RelaySocket implements RespSocket {
  readonly writableLength = 0;
  readonly localAddress = undefined;
  readonly localPort = undefined;
  private onData: ((chunk: Buffer) => void) | undefined;
  private written: Buffer[] = [];
  private conn: RespConnection | undefined;
  private done: ((reply: RelayReply) => void) | undefined;

  constructor(
    readonly remoteAddress: string | undefined,
    readonly remotePort: number | undefined,
    private readonly push: ((bytes: Uint8Array) => void) | undefined,
  ) {}

  on(event: string, listener: (chunk: Buffer) => void): this {
    if (event === 'data') this.onData = listener;
    return this;
  }

  deliver(bytes: Buffer): void {
    this.onData!(bytes);
  }

  /** Resolves with everything the connection writes until the command delivered next is answered. */
  reply(conn: RespConnection): Promise<RelayReply> {
    this.conn = conn;
    return new Promise((resolve) => {
      this.done = resolve;
    });
  }

  write(chunk: Buffer): boolean {
    const done = this.done;
    if (done === undefined) {
      this.push?.(chunk);
      return true;
    }
    this.written.push(chunk);
    const conn = this.conn!;
    if (conn.commandsInFlight === 0) {
      this.done = undefined;
      const bytes = Buffer.concat(this.written);
      this.written = [];
      done({
        bytes,
        written: conn.writtenFragments.toArray(),
        writtenSinceStamp: conn.writtenSinceStamp,
        pubsubMode: conn.pubsubMode,
        monitoring: conn.monitoring,
      });
      if (this.push === undefined) conn.close();
    }
    return true;
  }

  setNoDelay(): this {
    return this;
  }
  pause(): this {
    return this;
  }
  resume(): this {
    return this;
  }
  destroy(): this {
    return this;
  }
  end(): this {
    return this;
  }
}
