// The load client's connection: one TCP socket, requests encoded into a reused buffer and written
// once per batch, replies parsed in place as they arrive. Requests are identified by a caller-chosen
// integer tag (the driver's slot index), kept in a ring in send order: RESP answers in order, so the
// n-th reply belongs to the ring's head. No promise, closure or object per request; the socket's
// handlers are created once per connection.

import { connect, type Socket } from 'node:net';
import { performance } from 'node:perf_hooks';
import { assert } from '../../src/core/assert.js';
import { REPLY_ERROR, ReplyParser, ReplyProtocolError } from './reply-parser.js';
import { type RequestTemplates, RequestWriter } from './request-writer.js';

/** How long opening a connection (TCP and AUTH) may take. */
export const CONNECT_TIMEOUT_MS = 5000;
/** The tag of a setup request (AUTH, PING) the connection answers itself. */
const SETUP_TAG = -1;

export interface Target {
  host: string;
  port: number;
  password: string | undefined;
}

/** What a connection reports to its driver. */
export interface ConnectionSink {
  /** The reply to request `tag` arrived; `conn.parser` holds its error text. Called in send order. */
  onReply(conn: Connection, tag: number, status: number, nulls: number, nowMs: number): void;
  /** The open connection was lost (`conn.lostKind` says why); its in-flight tags are still queued. */
  onLost(conn: Connection): void;
}

export type ConnectionState = 'idle' | 'opening' | 'ready' | 'closed';

export class Connection {
  state: ConnectionState = 'idle';
  /** Why the connection was lost: `timeout`, `protocol`, an errno code, or `closed` by the server. */
  lostKind = '';
  readonly writer: RequestWriter;
  readonly parser = new ReplyParser();
  private socket: Socket | undefined;
  /** Tags of the requests in flight, in send order: a ring of `tags.length`. */
  private readonly tags: Int32Array;
  private head = 0;
  private count = 0;
  private opened: { resolve: () => void; reject: (error: Error) => void } | undefined;

  constructor(
    readonly index: number,
    private readonly target: Target,
    templates: RequestTemplates,
    inFlightMax: number,
    private readonly sink: ConnectionSink,
  ) {
    this.writer = new RequestWriter(templates);
    this.tags = new Int32Array(inFlightMax + 1);
  }

  get inFlight(): number {
    return this.count;
  }

  /** The tag of the oldest request in flight; -1 when none. */
  get oldest(): number {
    return this.count === 0 ? -1 : this.tags[this.head];
  }

  /** Opens the socket and authenticates; resolves when requests may be sent. */
  open(): Promise<void> {
    assert(this.state === 'idle' || this.state === 'closed', `open() on a ${this.state} connection`);
    this.state = 'opening';
    this.lostKind = '';
    this.head = 0;
    this.count = 0;
    this.writer.clear();
    const { host, port } = this.target;
    const socket = connect({ host, port });
    this.socket = socket;
    socket.setNoDelay(true);
    socket.setTimeout(CONNECT_TIMEOUT_MS, () => this.destroy('connect timeout'));
    socket.on('connect', () => this.onConnect(socket));
    socket.on('data', (chunk: Buffer) => this.onData(socket, chunk));
    socket.on('error', (err: NodeJS.ErrnoException) => {
      if (this.socket === socket && this.lostKind === '') this.lostKind = err.code ?? err.message;
    });
    socket.on('close', () => this.onClose(socket));
    return new Promise((resolve, reject) => {
      this.opened = { resolve, reject };
    });
  }

  /** Adds a request the writer just encoded; its reply will be reported with `tag`. */
  push(tag: number): void {
    assert(this.count < this.tags.length, 'more requests in flight than the connection allows');
    this.tags[(this.head + this.count) % this.tags.length] = tag;
    this.count++;
  }

  /** Removes and returns the oldest tag in flight (for failing them after a loss). */
  shift(): number {
    assert(this.count > 0, 'no request in flight');
    const tag = this.tags[this.head];
    this.head = (this.head + 1) % this.tags.length;
    this.count--;
    return tag;
  }

  /** Writes the pending requests in one socket write. */
  flush(): void {
    const socket = this.socket;
    if (this.writer.length === 0 || socket === undefined) return;
    if (this.state !== 'ready' && this.state !== 'opening') {
      this.writer.clear();
      return;
    }
    socket.write(this.writer.take());
    // Written at once: the kernel has the bytes and the buffer can be reused.
    this.writer.release(socket.writableLength === 0);
  }

  /** Closes the connection, noting `kind` as the reason (the sink hears of it as a loss if it was ready). */
  destroy(kind: string): void {
    if (this.lostKind === '') this.lostKind = kind;
    this.socket?.destroy();
  }

  /** Closes the connection at the end of a run: no loss is reported. */
  close(): void {
    this.state = 'closed';
    this.socket?.destroy();
    this.socket = undefined;
  }

  private onConnect(socket: Socket): void {
    if (this.socket !== socket) return;
    socket.setTimeout(0);
    const password = this.target.password;
    if (password === undefined) this.becomeReady();
    else {
      // The connect timeout covers AUTH too.
      socket.setTimeout(CONNECT_TIMEOUT_MS, () => this.destroy('connect timeout'));
      this.writer.command(['AUTH', password]);
      this.push(SETUP_TAG);
      this.flush();
    }
  }

  private becomeReady(): void {
    this.socket?.setTimeout(0);
    this.state = 'ready';
    const opened = this.opened;
    this.opened = undefined;
    opened?.resolve();
  }

  private onData(socket: Socket, chunk: Buffer): void {
    if (this.socket !== socket || this.state === 'closed') return;
    const nowMs = performance.now();
    const parser = this.parser;
    let at = 0;
    try {
      while ((at = parser.next(chunk, at)) !== -1) {
        if (this.count === 0) throw new ReplyProtocolError('a reply arrived with no request in flight');
        const tag = this.shift();
        if (tag === SETUP_TAG) this.onSetupReply();
        else this.sink.onReply(this, tag, parser.status, parser.nulls, nowMs);
        if (this.socket !== socket) return; // the sink closed the connection
      }
    } catch (error) {
      if (!(error instanceof ReplyProtocolError)) throw error;
      this.destroy('protocol');
      return;
    }
    this.flush();
  }

  private onSetupReply(): void {
    if (this.parser.status === REPLY_ERROR) {
      const opened = this.opened;
      this.opened = undefined;
      opened?.reject(new Error(`AUTH failed: ${this.parser.errorText()}`));
      this.destroy('auth');
      return;
    }
    this.becomeReady();
  }

  private onClose(socket: Socket): void {
    if (this.socket !== socket) return;
    const wasReady = this.state === 'ready';
    this.state = 'closed';
    this.socket = undefined;
    if (this.lostKind === '') this.lostKind = 'closed';
    const opened = this.opened;
    this.opened = undefined;
    const { host, port } = this.target;
    opened?.reject(new Error(`cannot connect to ${host}:${port}: ${this.lostKind}`));
    if (wasReady) this.sink.onLost(this);
  }
}
