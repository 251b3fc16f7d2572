// A worker's own RESP port (`--worker-ports`): clients of the keys in this worker's fragments talk to
// the thread that owns them, with no ring crossing — the command is parsed, run in the fragment
// actors and answered here. The commands are the main port's (src/main/resp/commands.ts), run over
// this host: a key of another worker is answered `-MOVED slot host:port` (that worker's port), in a
// cluster a key another member serves `-MOVED` to its worker's port, or its main port when it told
// none (by the serving table the main thread publishes, src/main/mesh/failover-catch-up.ts, and the
// ports the members tell each other, ClientPorts in proto/peer.proto), keys served in two places
// `-CROSSSLOT`; what needs the whole node (INFO, CONFIG, CLUSTER, SCAN, DBSIZE, WAIT …, and a write
// that waits for replica acknowledgements) is run on the main thread and its reply passed back;
// subscriptions run there on a connection kept for the client (a session), whose Pub/Sub messages
// are pushed back to it; MONITOR is refused, naming the main port.

import { createServer, type Server, type Socket } from 'node:net';
import type { Logger } from 'pino';
import { copyBytes, copyRange } from '../core/bytes.js';
import { internalError, type TesseraError } from '../core/errors.js';
import { FragmentOp, type ReplySink } from '../core/fragment.js';
import { HybridLogicalClock } from '../core/hlc.js';
import { Keyspace, slotOfRange } from '../core/keyspace.js';
import {
  PORT_STATS_PUBLISH_INTERVAL_MS,
  SLOWLOG_LOG_SLOWER_THAN_US_DEFAULT,
  SLOWLOG_MAX_LEN_DEFAULT,
} from '../core/limits.js';
import { Durability, OpKind, type Priority, type Reply } from '../core/ops.js';
import { RATE_SAMPLE_INTERVAL_MS } from '../core/rate-window.js';
import { isLive, recordBytes, writeRecordHeader } from '../core/record.js';
import type { RespCommand } from '../core/resp-parser.js';
import type { RespWriter } from '../core/resp-writer.js';
import { type KeyRouter, NOT_LOCAL, type WriteSpec } from '../main/key-router.js';
import { listenOn } from '../main/listen.js';
import { SERVING_HELD } from '../main/mesh/failover-catch-up.js';
import {
  type CommandSpec,
  commandStatsOfTable,
  crossSlot,
  keyArguments,
  SLOT_NOT_SERVED,
  writeErrorText,
} from '../main/resp/commands.js';
import { ReplyFlusher, type ReplySlot, RespClients, type RespConnection } from '../main/resp/connection.js';
import { type RespHost, RespPassword, type RespSettings } from '../main/resp/host.js';
import { LatencyMonitor } from '../main/resp/latency-monitor.js';
import { monitorLine } from '../main/resp/monitor.js';
import { RespStats } from '../main/resp/server.js';
import { SlowLog } from '../main/resp/slowlog.js';
import { TurnClock } from '../main/turn-clock.js';
import type { ResultHandler } from '../main/worker-link.js';
import { workerOfFragment } from '../native-bindings/manifest.js';
import type { ClientEndpoint, RelayReply, WorkerPortEvent, WorkerRespInit } from '../threads/messages.js';
import { RESULT_HEADER_BYTES, resultRecordBytes, writeResultHeader } from '../threads/op-codec.js';
import { PortCounter, PortCounters } from '../threads/port-counters.js';
import { type OpReplies, writeOpReply } from './result-writer.js';
import type { WorkerRuntime } from './worker-runtime.js';

const EMPTY = Buffer.alloc(0);
/** `WorkerRespPort.targetOfSlot`: no member serves the slot now, or this node catches it up first. */
const NOT_SERVED = -1;
const CATCHING_UP = -2;
/** Another member as a target: below CATCHING_UP, apart from the workers' indices. */
const memberTarget = (member: number): number => -3 - member;
const memberOfTarget = (target: number): number => -3 - target;

export class WorkerRespPort implements RespHost {
  readonly stats = new RespStats();
  readonly commandStats = commandStatsOfTable();
  readonly errorCodes = new Map<string, number>();
  readonly slowlog = new SlowLog(SLOWLOG_LOG_SLOWER_THAN_US_DEFAULT, SLOWLOG_MAX_LEN_DEFAULT);
  readonly latencyMonitor = new LatencyMonitor(0);
  /** MONITOR runs on the main port only: none here. */
  readonly monitors = new Set<RespConnection>();
  readonly main = undefined;
  readonly settings: RespSettings;
  readonly keys: WorkerKeys;
  private readonly server: Server;
  private readonly clients = new RespClients();
  private readonly flusher = new ReplyFlusher();
  private readonly password: RespPassword | undefined;
  private readonly keyspace: Keyspace;
  /** Every worker's port, by worker index (0: not known yet). */
  private ports: number[];
  /** In a cluster: the serving member per fragment (shared with the main thread), and members' client ports. */
  private readonly serving: Int32Array | undefined;
  private endpoints: ClientEndpoint[];
  /** Commands run on the main thread, waiting for their replies (by relay id), and who waits on each. */
  private readonly relays = new Map<number, { slot: ReplySlot; session: number; answered: () => void }>();
  /** Clients with a session on the main thread (their subscriptions), both ways. */
  private readonly sessions = new Map<RespConnection, number>();
  private readonly sessionClients = new Map<number, RespConnection>();
  private nextSessionId = 1;
  private nextRelayId = 1;
  private listeningPort = 0;
  /** `commandStats.changes` plus the error replies counted, at the last `resp-stats` sent. */
  private publishedChanges = 0;
  /** Int32: MONITOR clients on the node (WorkerRespInit.monitors). */
  private readonly monitorCount: Int32Array;
  /** MONITOR lines of this turn, sent after it. */
  private monitorLines: string[] = [];
  /** When the last `resp-stats` was sent. */
  private statsPublishedAtMs = 0;
  /** This port's row of the node's INFO counters, and its timer. */
  private readonly counters: PortCounters;
  private readonly publishTimer: NodeJS.Timeout;

  constructor(
    private readonly index: number,
    private readonly runtime: WorkerRuntime,
    private readonly init: WorkerRespInit,
    /** Posts to the main thread: a command to run (`runElsewhere`), a session's end, the port's figures. */
    private readonly post: (event: WorkerPortEvent) => void,
    readonly logger: Logger,
  ) {
    this.settings = {
      durability: init.durability,
      replicaAcks: init.replicaAcks,
      fragments: init.fragments,
      valueBytesMax: init.valueBytesMax,
    };
    this.keyspace = new Keyspace(init.fragments);
    this.keys = new WorkerKeys(runtime, this.keyspace, init);
    this.password = init.password === undefined ? undefined : new RespPassword(init.password);
    this.ports = [...init.ports];
    this.serving = init.cluster === undefined ? undefined : new Int32Array(init.cluster.serving);
    this.endpoints = init.cluster?.endpoints ?? [];
    this.server = createServer((socket) => this.accept(socket));
    // A worker restarted after a crash counts on from what it published before.
    const counters = new PortCounters(init.counters);
    this.counters = counters;
    this.monitorCount = new Int32Array(init.monitors);
    const stats = this.stats;
    stats.commandsProcessed = counters.read(index, PortCounter.CommandsProcessed);
    stats.closedErrorReplies = counters.read(index, PortCounter.ErrorReplies);
    stats.keyspaceHits = counters.read(index, PortCounter.KeyspaceHits);
    stats.keyspaceMisses = counters.read(index, PortCounter.KeyspaceMisses);
    stats.netInputBytes = counters.read(index, PortCounter.NetInputBytes);
    stats.netOutputBytes = counters.read(index, PortCounter.NetOutputBytes);
    this.clients.received = counters.read(index, PortCounter.ConnectionsReceived);
    this.clients.rejected = counters.read(index, PortCounter.RejectedConnections);
    if (init.stats !== undefined) {
      this.commandStats.add(init.stats.commands);
      for (const [code, count] of init.stats.errors) this.errorCodes.set(code, count);
    }
    this.publishTimer = setInterval(() => this.publishCounters(), RATE_SAMPLE_INTERVAL_MS);
    this.publishTimer.unref();
  }

  /**
   * Writes this port's counters where the main thread's INFO reads them, and sends its command
   * figures when they moved, at most every PORT_STATS_PUBLISH_INTERVAL_MS unless `final`.
   */
  private publishCounters(final = false): void {
    const c = this.counters;
    const i = this.index;
    const stats = this.stats;
    let errorReplies = stats.closedErrorReplies;
    for (const conn of this.clients.values()) errorReplies += conn.errorReplies;
    c.write(i, PortCounter.ConnectedClients, this.clients.size);
    c.write(i, PortCounter.ConnectionsReceived, this.clients.received);
    c.write(i, PortCounter.RejectedConnections, this.clients.rejected);
    c.write(i, PortCounter.CommandsProcessed, stats.commandsProcessed);
    c.write(i, PortCounter.ErrorReplies, errorReplies);
    c.write(i, PortCounter.KeyspaceHits, stats.keyspaceHits);
    c.write(i, PortCounter.KeyspaceMisses, stats.keyspaceMisses);
    c.write(i, PortCounter.NetInputBytes, stats.netInputBytes);
    c.write(i, PortCounter.NetOutputBytes, stats.netOutputBytes);
    const nowMs = Date.now();
    if (!final && nowMs - this.statsPublishedAtMs < PORT_STATS_PUBLISH_INTERVAL_MS) return;
    // A change in either: an error reply may come without a command (a protocol error).
    let changes = this.commandStats.changes;
    for (const count of this.errorCodes.values()) changes += count;
    if (changes === this.publishedChanges) return;
    this.publishedChanges = changes;
    this.statsPublishedAtMs = nowMs;
    this.post({
      kind: 'resp-stats',
      stats: { commands: this.commandStats.snapshot(), errors: [...this.errorCodes] },
    });
  }

  /** Starts listening; resolves with the port once bound. */
  async listen(): Promise<number> {
    const { port } = await listenOn(this.server, this.init.port, this.init.bind);
    this.listeningPort = port;
    this.ports[this.index] = port;
    return port;
  }

  /** Every worker's port, once all of them listen. */
  setPorts(ports: number[]): void {
    this.ports = [...ports];
    this.ports[this.index] = this.listeningPort;
  }

  /** Where the other members serve clients, as they connect and join. */
  setEndpoints(endpoints: ClientEndpoint[]): void {
    this.endpoints = endpoints;
  }

  get requiresAuth(): boolean {
    return this.password !== undefined;
  }

  passwordMatches(password: Uint8Array): boolean {
    return this.password?.matches(password) ?? false;
  }

  memoryFull(): boolean {
    const max = this.init.maxMemoryBytes;
    return max !== 0 && this.runtime.fragmentBoard.memoryBytes() > max;
  }

  connections(): RespConnection[] {
    return [...this.clients.values()];
  }

  flushSoon(conn: RespConnection): void {
    this.flusher.soon(conn);
  }

  forget(conn: RespConnection): void {
    this.endSession(conn);
    if (this.clients.delete(conn)) this.stats.closedErrorReplies += conn.errorReplies;
  }

  /** `conn`'s session on the main thread, made on its first subscription command. */
  private sessionOf(conn: RespConnection): number {
    let session = this.sessions.get(conn);
    if (session === undefined) {
      session = this.nextSessionId++;
      this.sessions.set(conn, session);
      this.sessionClients.set(session, conn);
    }
    return session;
  }

  /** Ends `conn`'s session, if it has one: its subscriptions end with it. */
  private endSession(conn: RespConnection): void {
    const session = this.sessions.get(conn);
    if (session === undefined) return;
    this.sessions.delete(conn);
    this.sessionClients.delete(session);
    this.post({ kind: 'relay-end', session });
  }

  /** A push (a Pub/Sub message) the main thread sends a session's client. */
  onRelayPush(session: number, bytes: Uint8Array): void {
    this.sessionClients.get(session)?.push(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length));
  }

  /** While a client of the node is a MONITOR (the main thread's count, shared). */
  get monitored(): boolean {
    return Atomics.load(this.monitorCount, 0) !== 0;
  }

  /** Gathers the lines of this turn's commands and sends them to the main thread once, after it. */
  showToMonitors(from: RespConnection, cmd: RespCommand, spec: CommandSpec): void {
    const line = monitorLine(from.remoteAddress, cmd, spec);
    if (line === undefined) return;
    this.monitorLines.push(line);
    if (this.monitorLines.length === 1) setImmediate(this.sendMonitorLines);
  }

  private readonly sendMonitorLines = (): void => {
    const lines = this.monitorLines;
    this.monitorLines = [];
    if (lines.length > 0) this.post({ kind: 'monitor-lines', lines });
  };

  /** RESET: the client's subscriptions, kept in its session on the main thread, end with it. */
  unsubscribeAll(conn: RespConnection): void {
    this.endSession(conn);
  }

  /**
   * Keys another thread or node serves: `-MOVED` to its port (the slot of the first key) — another
   * worker's here, or in a cluster the port of the serving member's worker (its main port when it
   * told none); keys served in two places: `-CROSSSLOT`. Commands run on the main thread are not routed by key here.
   */
  redirected(_conn: RespConnection, spec: CommandSpec, cmd: RespCommand, w: RespWriter): boolean {
    if (spec.needs !== undefined) return false;
    const keys = keyArguments(spec, cmd);
    if (keys === undefined) return false;
    const [first, last, step] = keys;
    const slot = slotOfRange(cmd.bufs[first], cmd.starts[first], cmd.ends[first]);
    const target = this.targetOfSlot(slot);
    for (let i = first + step; i <= last; i += step) {
      if (this.targetOfSlot(slotOfRange(cmd.bufs[i], cmd.starts[i], cmd.ends[i])) !== target)
        return crossSlot(w);
    }
    if (target === this.index) return false;
    if (target === NOT_SERVED) {
      writeErrorText(w, SLOT_NOT_SERVED);
      return true;
    }
    if (target === CATCHING_UP) {
      w.errorCode('TRYAGAIN', `slot ${slot} is being caught up on this node; it is served again shortly`);
      return true;
    }
    const [host, port] =
      target >= 0
        ? [this.init.host, this.ports[target]]
        : this.memberEndpoint(memberOfTarget(target), this.keyspace.fragmentOfSlot(slot));
    if (port === 0) {
      w.errorCode('TRYAGAIN', `the port that serves slot ${slot} is not known yet`);
      return true;
    }
    w.errorCode('MOVED', `${slot} ${host}:${port}`);
    return true;
  }

  /**
   * Who serves `slot`: a worker of this node (its index, ≥ 0), another member (`memberTarget`),
   * NOT_SERVED, or CATCHING_UP.
   */
  private targetOfSlot(slot: number): number {
    const fragment = this.keyspace.fragmentOfSlot(slot);
    const serving = this.serving;
    if (serving !== undefined) {
      const member = Atomics.load(serving, fragment);
      if (member === -1) return NOT_SERVED;
      if (member === SERVING_HELD) return CATCHING_UP;
      if (member !== this.init.cluster!.selfIndex) return memberTarget(member);
    }
    return this.init.workerOfFragment[fragment];
  }

  /** Where `member` serves `fragment`'s clients: the port of its worker that owns it, else its main port. */
  private memberEndpoint(member: number, fragment: number): [string, number] {
    const endpoint = this.endpoints[member];
    if (endpoint === undefined) return ['', 0];
    const workers = endpoint.workerPorts;
    if (workers.length === 0) return [endpoint.host, endpoint.port];
    return [endpoint.host, workers[workerOfFragment(fragment, endpoint.workerGroups, workers.length)]];
  }

  /**
   * Whether `spec` runs on this thread for `conn`. In a cluster, a write that waits for replica
   * acknowledgements runs on the main thread, which counts them.
   */
  runsHere(conn: RespConnection, spec: CommandSpec): boolean {
    if (spec.needs !== undefined) return false;
    return this.serving === undefined || conn.replicaAcks === 0 || !spec.flags.includes('write');
  }

  /**
   * Has the main thread run a command that needs the node (a subscription or MONITOR: on the
   * client's session). The connection's later commands wait for its answer, as they would on the
   * main port: a SET pipelined after a FLUSHALL must not run before it.
   */
  runElsewhere(conn: RespConnection, spec: CommandSpec, cmd: RespCommand): boolean {
    const slot = conn.defer();
    const id = this.nextRelayId++;
    const session = spec.needs === 'session' ? this.sessionOf(conn) : 0;
    const args: Uint8Array[] = [];
    for (let i = 0; i < cmd.argc; i++) args.push(Buffer.from(cmd.arg(i)));
    conn.blockUntil(
      new Promise<void>((answered) => {
        this.relays.set(id, { slot, session, answered });
      }),
    );
    this.post({
      kind: 'relay',
      id,
      worker: this.index,
      session,
      args,
      protocol: conn.protocol,
      authenticated: conn.authenticated,
      name: conn.name,
      durability: conn.durability,
      replicaAcks: conn.replicaAcks,
      written: conn.writtenFragments.toArray(),
      writtenSinceStamp: conn.writtenSinceStamp,
      remoteIp: conn.socket.remoteAddress,
      remotePort: conn.socket.remotePort,
    });
    return false;
  }

  /**
   * The main thread's reply to a relayed command, in its place in the connection's replies; the
   * fragments the connection wrote are what the command left of them (a WAIT forgets them).
   */
  onRelayReply(id: number, reply: RelayReply): void {
    const relayed = this.relays.get(id);
    if (relayed === undefined) return;
    this.relays.delete(id);
    const { slot, session, answered } = relayed;
    const conn = slot.conn;
    // Subscribed or not is the session's (RESP2 then limits the client to the subscription commands).
    if (session !== 0) {
      conn.pubsubMode = reply.pubsubMode;
      conn.monitoring = reply.monitoring;
    }
    conn.writtenFragments.clear();
    for (const fragment of reply.written) conn.writtenFragments.add(fragment);
    conn.writtenSinceStamp = reply.writtenSinceStamp;
    const w = conn.beginReply(slot);
    w.raw(reply.bytes);
    conn.endReply(slot);
    answered();
  }

  /** Stops accepting and closes every client; resolves once the listener is closed. */
  close(): Promise<void> {
    for (const conn of this.clients.values()) conn.close();
    clearInterval(this.publishTimer);
    this.publishCounters(true);
    return new Promise((resolve) => {
      if (!this.server.listening) resolve();
      else this.server.close(() => resolve());
    });
  }

  private accept(socket: Socket): void {
    this.clients.accept(this, socket);
  }
}

/**
 * Reads and writes of a worker port, straight into this worker's fragment actors. Writes are stamped
 * from the node's clock, shared with the main thread, so a key written through both ports keeps its
 * writes in the order they were made.
 */
class WorkerKeys implements KeyRouter {
  readonly turnClock = new TurnClock();
  /** What WAIT compares a fragment's serving changes with (the main thread publishes it in a cluster). */
  get servingStamp(): number {
    const serving = this.serving;
    return serving === undefined ? 0 : Atomics.load(serving, serving.length - 1);
  }
  lastWriteFragment = 0;
  private readonly clock: HybridLogicalClock;
  private readonly nodeIdBytes: Buffer;

  /** In a cluster: the serving table, its last entry the serving stamp (FailoverCatchUp.published). */
  private readonly serving: Int32Array | undefined;

  constructor(
    private readonly runtime: WorkerRuntime,
    private readonly keyspace: Keyspace,
    init: WorkerRespInit,
  ) {
    this.serving = init.cluster === undefined ? undefined : new Int32Array(init.cluster.serving);
    this.clock = new HybridLogicalClock(init.maxClockSkewMs, init.clockCell);
    this.nodeIdBytes = Buffer.from(init.nodeId);
  }

  fragmentOf(key: Uint8Array): number {
    return this.keyspace.fragmentOf(key);
  }

  /** Straight from the store when the fragment holds nothing uncommitted (as the main thread's snapshot reads). */
  readLocal(fragment: number, key: Uint8Array): Uint8Array | undefined | typeof NOT_LOCAL {
    const core = this.runtime.actorOf(fragment);
    if (core === undefined || core.hasUncommitted()) return NOT_LOCAL;
    const record = this.runtime.kvStore.get(fragment, key);
    return record !== undefined && isLive(record, this.turnClock.nowMs()) ? record : undefined;
  }

  submitRead<T>(
    fragment: number,
    key: Uint8Array,
    priority: Priority,
    headerOnly: boolean,
    handler: ResultHandler<T>,
    token: T,
  ): TesseraError | undefined {
    const core = this.runtime.actorOf(fragment);
    if (core === undefined) return notServed(fragment);
    // The key is a view of the connection's input, which the next read may overwrite.
    const op = new FragmentOp(OpKind.Read, 0, priority, Durability.Memory, Buffer.from(key), EMPTY);
    op.headerOnly = headerOnly;
    op.sink = new LocalRequest(handler, token);
    this.runtime.submitLocal(core, op);
    return undefined;
  }

  submitWrite<T>(spec: WriteSpec, handler: ResultHandler<T>, token: T): TesseraError | undefined {
    const fragment = this.keyspace.fragmentOf(spec.key);
    this.lastWriteFragment = fragment;
    const core = this.runtime.actorOf(fragment);
    if (core === undefined) return notServed(fragment);
    this.clock.tick(this.turnClock.nowMs());
    const keyBytes = spec.key.length;
    const valueBytes = spec.value?.length ?? 0;
    // Key and record in one allocation: the actor keeps both until the write is committed.
    const buf = Buffer.allocUnsafe(keyBytes + recordBytes(this.nodeIdBytes.length, valueBytes));
    copyBytes(buf, 0, spec.key);
    const modify = spec.kind === OpKind.Modify;
    const p = writeRecordHeader(
      buf,
      keyBytes,
      !modify && spec.value === undefined,
      this.clock.wallMs,
      this.clock.logical,
      spec.expiresAtMs,
      this.nodeIdBytes,
    );
    if (valueBytes > 0) copyBytes(buf, p, spec.value!);
    const op = new FragmentOp(
      spec.kind,
      0,
      spec.priority,
      spec.durability,
      buf.subarray(0, keyBytes),
      buf.subarray(keyBytes),
    );
    op.wantsPrior = spec.wantsPrior;
    if (modify) {
      op.modifier = spec.modifier;
      op.flags = spec.flags;
      op.arg = spec.arg;
      op.operand = spec.operand === undefined ? undefined : Buffer.from(spec.operand);
    }
    op.sink = new LocalRequest(handler, token);
    this.runtime.submitLocal(core, op);
    return undefined;
  }
}

function notServed(fragment: number): TesseraError {
  return internalError(`fragment ${fragment} is not served by this worker`);
}

/** Where result records for a worker port's handlers are built (grown as a record needs). */
let scratch = Buffer.alloc(4096);

function scratchOf(bytes: number): Buffer {
  if (scratch.length < bytes) scratch = Buffer.alloc(Math.max(bytes, scratch.length * 2));
  return scratch;
}

/**
 * A worker port's op: its reply is built as the result ring carries it, and handed to the command's
 * handler (src/main/resp/key-access.ts) as a ring reply would be.
 */
class LocalRequest<T> implements ReplySink, OpReplies {
  constructor(
    private readonly handler: ResultHandler<T>,
    private readonly token: T,
  ) {}

  onReply(op: FragmentOp): void {
    writeOpReply(op, this);
  }

  record(reply: Reply, detail: number, reqId: number, record: Uint8Array, headerOnly: boolean): void {
    const n = RESULT_HEADER_BYTES + resultRecordBytes(record, headerOnly);
    const buf = scratchOf(n);
    copyRange(record, 0, n - RESULT_HEADER_BYTES, buf, writeResultHeader(buf, 0, reply, detail, reqId));
    this.handler.onResult(this.token, buf, 0, n);
  }

  text(status: number, detail: number, reqId: number, text: string): void {
    const n = RESULT_HEADER_BYTES + Buffer.byteLength(text);
    const buf = scratchOf(n);
    buf.write(text, writeResultHeader(buf, 0, status, detail, reqId), n - RESULT_HEADER_BYTES, 'utf8');
    this.handler.onResult(this.token, buf, 0, n);
  }

  ack(reply: Reply, detail: number, reqId: number): void {
    const buf = scratchOf(RESULT_HEADER_BYTES);
    writeResultHeader(buf, 0, reply, detail, reqId);
    this.handler.onResult(this.token, buf, 0, RESULT_HEADER_BYTES);
  }
}
