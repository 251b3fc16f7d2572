// One client connection of the RESP server. Commands are parsed from socket chunks, executed in
// arrival order, and their replies leave in the same order even though fragments answer out of
// order: a command that completes while earlier ones are still waiting parks its encoded reply in
// its slot of an ordered queue, and the queue drains as its head completes. Replies of one turn go
// out in one socket write. A connection that stops reading is disconnected once its unsent replies
// pass the output limit; a connection with too many commands in flight stops being read until
// they complete.

import type { Socket } from 'node:net';
import { assert } from '../../core/assert.js';
import { FragmentSet } from '../../core/fragment-set.js';
import { CONNECTION_FLUSH_BYTES, CONNECTION_LINGER_MS, RESP_CLIENTS_MAX } from '../../core/limits.js';
import type { Durability } from '../../core/ops.js';
import { Subscriptions } from '../../core/pubsub.js';
import {
  RESP_CLIENT_BUFFER_BYTES_MAX,
  type RespCommand,
  RespParser,
  RespProtocolError,
} from '../../core/resp-parser.js';
import { type RespProtocol, RespWriter } from '../../core/resp-writer.js';
import type { Delivery, PubSubClient } from '../pubsub.js';
import { type CommandSpec, executeCommand } from './commands.js';
import type { RespHost } from './host.js';
import type { ReplyMode } from './key-access.js';

/** Commands in flight per connection before its socket is paused (a pipeline depth no client needs). */
export const CONNECTION_COMMANDS_IN_FLIGHT_MAX = 4096;
/**
 * Reply bytes per connection — sent but not yet taken by the client, plus replies parked behind a
 * slower one — past which the client is considered stuck and disconnected (Redis's client output
 * buffer limit).
 */
export const CONNECTION_OUTPUT_BYTES_MAX = 64 * 1024 * 1024;
/** A dropped reply's bytes (CLIENT REPLY OFF / SKIP). */
const NO_REPLY = Buffer.alloc(0);

/**
 * A reply position in a connection's queue. Multi-key commands count their parts down in it and
 * gather partial results; `bytes` holds an encoded reply that completed ahead of its turn.
 */
export class ReplySlot {
  next: ReplySlot | null = null;
  ready = false;
  bytes: Buffer | null = null;
  /** Outstanding parts of a multi-key command. */
  parts = 0;
  /** Multi-key accumulator (DEL, EXISTS counts). */
  count = 0;
  /** MGET values in key order. */
  values: Array<Buffer | null> | null = null;
  /** First error of a multi-key command (RESP error text with its code). */
  error: string | null = null;
  /** What the reply answers (key-access.ts), 0 when the command answers by itself; up to two numeric arguments. */
  mode: ReplyMode | 0 = 0;
  a = 0;
  b = 0;
  /** Whether this slot is a write the connection counts as in flight. */
  write = false;
  /** The reply is dropped, not sent (CLIENT REPLY OFF / SKIP when the command ran). */
  silent = false;
  /** The command's INFO commandstats index (-1: none), and its reply's writer and error count at its start. */
  stat = -1;
  replyWriter: RespWriter | undefined = undefined;
  errorsBefore = 0;

  constructor(readonly conn: RespConnection) {}
}

/** What a connection uses of its socket: a TCP or TLS socket, or the main thread's end of a relayed command. */
export interface RespSocket {
  on(event: 'data' | 'error' | 'close', listener: (chunk: Buffer) => void): unknown;
  write(chunk: Buffer): unknown;
  readonly writableLength: number;
  setNoDelay(noDelay: boolean): unknown;
  pause(): unknown;
  resume(): unknown;
  destroy(): unknown;
  end(): unknown;
  readonly remoteAddress?: string;
  readonly remotePort?: number;
  readonly localAddress?: string;
  readonly localPort?: number;
}

function formatAddress(ip: string | undefined, port: number | undefined): string {
  const host = ip ?? '?';
  return `${host.includes(':') ? `[${host}]` : host}:${port ?? 0}`;
}

export class RespConnection implements PubSubClient {
  readonly id: number;
  readonly createdAtMs = Date.now();
  name = '';
  libName = '';
  libVersion = '';
  authenticated: boolean;
  /** Acknowledgement level of this connection's writes (TESSERA.DURABILITY). */
  durability: Durability;
  /** Other replicas each write waits for before it is answered (TESSERA.DURABILITY … REPLICAS n). */
  replicaAcks: number;
  /**
   * The fragments this connection wrote since a WAIT (or WAITAOF) last saw every replica there is
   * acknowledge them: what the next one asks about. A bitmap: recording one costs a write nothing.
   */
  readonly writtenFragments: FragmentSet;
  /**
   * The node's serving stamp (Dispatcher.servingStamp) when the oldest write in `writtenFragments`
   * was sent: a fragment whose serving replica changed after it cannot have its writes confirmed
   * by the replica that serves it now.
   */
  writtenSinceStamp = 0;
  lastCommand = 'NULL';
  lastCommandAtMs = this.createdAtMs;
  /** Writes sent to a worker and not yet answered: reads must not bypass them on this thread. */
  writesInFlight = 0;
  /** READONLY: reads may be served from this node's copy even when another replica serves the fragment. */
  readReplica = false;
  /** CLIENT REPLY OFF: replies are dropped until CLIENT REPLY ON. */
  replyOff = false;
  /** CLIENT REPLY SKIP: the next command's reply is dropped. */
  skipNextReply = false;
  /** The command running now has its reply dropped by a SKIP before it (CLIENT REPLY ON clears it). */
  replySkipped = false;
  /** While a command whose reply is dropped runs: the reply slots it takes are silent from the start. */
  private silencing = false;
  /** The worker whose RESP port handed this connection's command to the main thread (-1: none). */
  relayedFromWorker = -1;
  /** MONITOR: every command the server runs is shown to this connection. */
  monitoring = false;
  /** Pub/Sub: the channels, patterns and shard channels this connection is subscribed to. */
  readonly subscriptions = new Subscriptions();
  /**
   * Redis's CLIENT_PUBSUB: set by a subscribe, cleared by an unsubscribe that leaves none. Under
   * RESP2 it limits the connection to the subscription commands, PING, QUIT and RESET.
   */
  pubsubMode = false;
  /** The writer of the command running now: a push to this connection goes there, before its reply. */
  private running: RespWriter | null = null;
  /** The running command's output up to here is pushes, kept when its reply is dropped. */
  private pushedUpTo = 0;
  /** The command just executed, if it ran (not refused as unknown, by arity or by NOAUTH). */
  commandRan: CommandSpec | undefined = undefined;
  /** The INFO commandstats index of the command running now (-1 between commands): its deferred replies count there. */
  runningStat = -1;
  /**
   * performance.now() when the command being executed started: read once per run of commands, then
   * each command's end is the next one's start (its parsing counts with it).
   */
  commandClockMs = 0;
  readonly out: RespWriter;
  private readonly scratch: RespWriter;
  private readonly parser = new RespParser();
  private head: ReplySlot | null = null;
  private tail: ReplySlot | null = null;
  private inFlight = 0;
  private flushScheduled = false;
  private paused = false;
  /** Bytes of replies parked in slots, waiting for an earlier reply. */
  private parkedBytes = 0;
  /** Set by QUIT and protocol errors: close once the replies so far are sent. */
  private closeAfterFlush = false;
  /** A blocking command (WAIT) is waiting: the commands after it run once it has answered. */
  private blocked = false;
  closed = false;

  constructor(
    readonly server: RespHost,
    readonly socket: RespSocket,
    id: number,
  ) {
    this.id = id;
    this.authenticated = !server.requiresAuth;
    this.durability = server.settings.durability;
    this.replicaAcks = server.settings.replicaAcks;
    this.writtenFragments = new FragmentSet(server.settings.fragments);
    this.out = new RespWriter(2);
    this.scratch = new RespWriter(2);
    this.out.errorCodes = server.errorCodes;
    this.scratch.errorCodes = server.errorCodes;
    socket.setNoDelay(true);
    socket.on('data', (chunk: Buffer) => this.onData(chunk));
    socket.on('error', () => this.close());
    socket.on('close', () => this.close());
  }

  get protocol(): RespProtocol {
    return this.out.protocol;
  }

  /** The wall clock as this turn's commands read it (the node's turn clock): stamps, deadlines, TTLs. */
  nowMs(): number {
    return this.server.keys.turnClock.nowMs();
  }

  set protocol(p: RespProtocol) {
    this.out.protocol = p;
    this.scratch.protocol = p;
  }

  /** `ip:port` as Redis writes it (CLIENT LIST, CLIENT KILL ADDR): an IPv6 address in brackets. */
  get remoteAddress(): string {
    return formatAddress(this.socket.remoteAddress, this.socket.remotePort);
  }

  get localAddress(): string {
    return formatAddress(this.socket.localAddress, this.socket.localPort);
  }

  /** Commands parsed but not yet answered. */
  get commandsInFlight(): number {
    return this.inFlight;
  }

  /** Stops reading; the replies already queued are still sent (QUIT). */
  quitAfterReplies(): void {
    this.closeAfterFlush = true;
  }

  /**
   * Where the reply of the command being executed goes when it is answered right away: straight
   * out when nothing is waiting ahead of it, else a scratch writer whose bytes are parked.
   */
  private syncWriter(): RespWriter {
    if (this.head === null) return this.out;
    this.scratch.reset();
    return this.scratch;
  }

  /** Reserves the next reply position for a command answered later; pass the slot as the token. */
  defer(): ReplySlot {
    const slot = new ReplySlot(this);
    // Silent before it can be answered: a command may answer its slot before it returns.
    slot.silent = this.silencing;
    slot.stat = this.runningStat;
    if (this.tail === null) this.head = slot;
    else this.tail.next = slot;
    this.tail = slot;
    this.inFlight++;
    return slot;
  }

  /** The writer for `slot`'s reply: the connection's own when it is next in line. */
  beginReply(slot: ReplySlot): RespWriter {
    let w = this.out;
    if (slot !== this.head || slot.silent) {
      this.scratch.reset();
      w = this.scratch;
    }
    slot.replyWriter = w;
    slot.errorsBefore = w.errorReplies;
    return w;
  }

  /** Ends `slot`'s reply (written to the writer `beginReply` gave) and sends what is now in order. */
  endReply(slot: ReplySlot): void {
    if (slot.write) this.writesInFlight--;
    const w = slot.replyWriter;
    if (slot.stat !== -1 && w !== undefined && w.errorReplies !== slot.errorsBefore) {
      this.server.commandStats.fail(slot.stat);
    }
    slot.replyWriter = undefined;
    if (slot !== this.head) {
      if (slot.silent) {
        slot.bytes = NO_REPLY;
        slot.ready = true;
      } else this.park(slot);
      return;
    }
    this.popHead();
    while (this.head?.ready) {
      this.parkedBytes -= this.head.bytes!.length;
      this.out.raw(this.head.bytes!);
      this.popHead();
    }
    this.scheduleFlush();
  }

  /** Keeps a reply that is ready before its turn; a client whose parked replies grow too large is cut off. */
  private park(slot: ReplySlot): void {
    slot.bytes = this.scratch.take();
    slot.ready = true;
    this.parkedBytes += slot.bytes.length;
    if (this.parkedBytes > CONNECTION_OUTPUT_BYTES_MAX) this.outputOverflow(this.parkedBytes);
  }

  private popHead(): void {
    const slot = this.head!;
    this.head = slot.next;
    if (this.head === null) this.tail = null;
    slot.next = null;
    this.inFlight--;
    if (this.paused && this.inFlight < CONNECTION_COMMANDS_IN_FLIGHT_MAX / 2) this.resume();
  }

  private onData(chunk: Buffer): void {
    this.server.stats.netInputBytes += chunk.length;
    if (this.closed || this.closeAfterFlush) return;
    this.parser.push(chunk);
    this.drainCommands();
  }

  /** Executes every complete command the parser holds, until the in-flight bound pauses reading. */
  private drainCommands(): void {
    this.lastCommandAtMs = this.nowMs();
    this.commandClockMs = performance.now();
    for (;;) {
      if (this.blocked) break;
      if (this.inFlight >= CONNECTION_COMMANDS_IN_FLIGHT_MAX) {
        this.pause();
        break;
      }
      const command = this.parser.next();
      if (command === null) break;
      if (command instanceof RespProtocolError) {
        this.protocolError(command);
        return;
      }
      this.execute(command);
      if (this.closeAfterFlush || this.closed) break;
    }
    if (this.parser.bufferedBytes > RESP_CLIENT_BUFFER_BYTES_MAX) {
      this.server.logger.warn(
        { client: this.id, bytes: this.parser.bufferedBytes },
        'client query buffer too large',
      );
      this.close();
      return;
    }
    this.scheduleFlush();
  }

  private execute(command: RespCommand): void {
    const w = this.syncWriter();
    const before = this.tail;
    const mark = w.length;
    this.replySkipped = this.skipNextReply;
    this.skipNextReply = false;
    this.silencing = this.replyOff || this.replySkipped;
    this.running = w;
    this.pushedUpTo = mark;
    const answeredNow = executeCommand(this, command, w);
    this.running = null;
    this.silencing = false;
    if (answeredNow) {
      assert(before === this.tail, 'a command both answered and deferred');
      // Judged after the command: CLIENT REPLY ON answers, OFF and SKIP do not. Pushes (Pub/Sub
      // confirmations and messages) are sent regardless, as Redis 7.0 sends them.
      if (this.replyOff || this.replySkipped) w.truncate(this.pushedUpTo);
      // Answered at once, but behind replies still pending: park it in its own slot.
      if (w === this.scratch && w.length > 0) this.park(this.defer());
    }
    // After its own reply is placed: a monitoring client sees its PING answered, then shown.
    if (this.server.monitored && this.commandRan !== undefined)
      this.server.showToMonitors(this, command, this.commandRan);
  }

  /** A line that is not a command's reply (MONITOR's feed), sent after the replies queued before it. */
  sendLine(line: string): void {
    if (this.closed || this.replyOff) return;
    const w = this.syncWriter();
    w.simple(line);
    this.placeOutOfBand(w);
  }

  /** A Pub/Sub message for this connection, in its protocol. */
  receive(delivery: Delivery): void {
    this.push(delivery.resp(this.protocol));
  }

  /** An out-of-band push: after the replies queued so far, and before the running command's own. */
  push(bytes: Buffer): void {
    if (this.closed) return;
    const w = this.running;
    if (w !== null) {
      w.raw(bytes);
      this.markPushed(w);
    } else {
      const out = this.syncWriter();
      out.raw(bytes);
      this.placeOutOfBand(out);
    }
  }

  /** Sends what was written to `syncWriter()`'s writer outside any command: now, or parked in order. */
  private placeOutOfBand(w: RespWriter): void {
    if (w === this.scratch) this.park(this.defer());
    else this.scheduleFlush();
  }

  /** What the running command has written to `w` so far is pushes (kept when its reply is dropped). */
  markPushed(w: RespWriter): void {
    this.pushedUpTo = w.length;
  }

  /**
   * Holds back the commands after the one running (which has deferred its reply) until `done`
   * settles, as Redis does for a blocked client: WAIT's followers run once it has answered.
   */
  blockUntil(done: Promise<unknown>): void {
    this.blocked = true;
    const unblock = () => {
      this.blocked = false;
      if (!this.closed) this.drainCommands();
    };
    done.then(unblock, unblock);
  }

  private protocolError(error: RespProtocolError): void {
    const w = this.syncWriter();
    w.error(error.message);
    if (w === this.scratch) this.park(this.defer());
    this.server.logger.info({ client: this.id, err: error.message }, 'closing client after a protocol error');
    this.closeAfterFlush = true;
    this.scheduleFlush();
  }

  scheduleFlush(): void {
    if (this.closed) return;
    if (this.out.length >= CONNECTION_FLUSH_BYTES) {
      this.flush();
      return;
    }
    if (this.flushScheduled) return;
    this.flushScheduled = true;
    this.server.flushSoon(this);
  }

  /** Writes the replies in order so far (the server calls it for a scheduled flush). */
  flush(): void {
    this.flushScheduled = false;
    if (this.closed) return;
    if (this.out.length > 0) {
      this.server.stats.netOutputBytes += this.out.length;
      this.socket.write(this.out.take());
    }
    if (this.socket.writableLength > CONNECTION_OUTPUT_BYTES_MAX) {
      this.outputOverflow(this.socket.writableLength);
      return;
    }
    if (this.closeAfterFlush && this.head === null) {
      // Half-closed: what the client still sends is read and dropped until it closes too, or the
      // linger runs out (CONNECTION_LINGER_MS says why).
      this.socket.end();
      setTimeout(() => this.socket.destroy(), CONNECTION_LINGER_MS).unref();
      this.closed = true;
      this.server.forget(this);
    }
  }

  private outputOverflow(bytes: number): void {
    this.server.logger.warn(
      { client: this.id, bytes },
      'client output buffer limit reached: it is not reading its replies; disconnecting',
    );
    this.close();
  }

  private pause(): void {
    if (this.paused) return;
    this.paused = true;
    this.socket.pause();
  }

  private resume(): void {
    this.paused = false;
    this.socket.resume();
    // Commands already buffered in the parser need no new data to run.
    queueMicrotask(() => {
      if (!this.closed) this.drainCommands();
    });
  }

  /** Bytes received and not yet run as commands (CLIENT LIST's qbuf). */
  get queryBufferBytes(): number {
    return this.parser.bufferedBytes;
  }

  /** Bytes the parser holds for commands split across reads (CLIENT LIST's query buffer memory). */
  get queryBufferRetainedBytes(): number {
    return this.parser.retainedBytes;
  }

  /** Reply bytes written and not yet handed to the socket (CLIENT LIST's obl). */
  get outputBufferBytes(): number {
    return this.out.length;
  }

  /** Replies ready before their turn, waiting for the ones ahead (CLIENT LIST's omem). */
  get parkedReplyBytes(): number {
    return this.parkedBytes;
  }

  /** The socket's file descriptor, or -1 where Node does not expose it (CLIENT LIST's fd). */
  get fd(): number {
    const handle = (this.socket as unknown as { _handle?: { fd?: unknown } })._handle;
    return typeof handle?.fd === 'number' ? handle.fd : -1;
  }

  /** Whether a blocking command holds back this connection's later commands (INFO's blocked_clients). */
  get isBlocked(): boolean {
    return this.blocked;
  }

  /** Error replies this connection's writers have written. */
  get errorReplies(): number {
    return this.out.errorReplies + this.scratch.errorReplies;
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.socket.destroy();
    this.server.forget(this);
  }
}

/**
 * Sends connections' replies once this event-loop turn has handled all its I/O, together (as Redis
 * writes replies before it sleeps): a client reading many sockets is woken once for the burst
 * instead of once per socket.
 */
export class ReplyFlusher {
  /** Connections with replies to send at the end of this turn, and the spare list. */
  private queue: RespConnection[] = [];
  private spare: RespConnection[] = [];

  soon(conn: RespConnection): void {
    this.queue.push(conn);
    if (this.queue.length === 1) setImmediate(this.flushAll);
  }

  private readonly flushAll = (): void => {
    const queue = this.queue;
    this.queue = this.spare;
    this.spare = queue;
    for (const conn of queue) conn.flush();
    queue.length = 0;
  };
}

/** A face's clients: admitted up to RESP_CLIENTS_MAX (Redis's maxclients), counted for INFO. */
export class RespClients {
  private readonly open = new Set<RespConnection>();
  private nextId = 1;
  /** Connections accepted, and turned away at the limit, since the face started. */
  received = 0;
  rejected = 0;

  get size(): number {
    return this.open.size;
  }

  values(): IterableIterator<RespConnection> {
    return this.open.values();
  }

  /** The next client id (a relayed command's connection takes one too). */
  nextClientId(): number {
    return this.nextId++;
  }

  /** Admits a client on `socket` to `host`, or turns it away with Redis's error past the limit. */
  accept(host: RespHost, socket: Socket): void {
    this.received++;
    if (this.open.size >= RESP_CLIENTS_MAX) {
      this.rejected++;
      socket.end('-ERR max number of clients reached\r\n');
      return;
    }
    this.open.add(new RespConnection(host, socket, this.nextClientId()));
  }

  /** Forgets a closed client; true when it was one of these. */
  delete(conn: RespConnection): boolean {
    return this.open.delete(conn);
  }
}
