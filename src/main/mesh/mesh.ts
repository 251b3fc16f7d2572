// The peer mesh (DESIGN.md "Peer mesh", spec §4, A12): a listener for peers, one dial supervisor per
// other member (jittered exponential backoff, 100 ms → 30 s), and one authenticated connection per
// peer pair. When both ends dial at once, both keep the connection of higher rank
// (src/core/handshake.ts) and close the other, so they agree without depending on arrival order.
// With TLS (Redis's tls-cluster) every connection is mutually verified TLS first, and the peer
// handshake runs inside it.

import { createServer, type Server, Socket } from 'node:net';
import { connect as connectTls, createServer as createTlsServer } from 'node:tls';
import type { Logger } from 'pino';
import { compareRank } from '../../core/handshake.js';
import {
  HANDSHAKE_TIMEOUT_MS,
  PEER_CONNECT_TIMEOUT_MS,
  PEER_RECONNECT_MS_BASE,
  PEER_RECONNECT_MS_MAX,
} from '../../core/limits.js';
import { ENVELOPE_FIELD_COUNTERS, type EnvelopePeek } from '../../core/peer-frame.js';
import type { ClusterConfig, PeerAddress } from '../cluster-config.js';
import { listenOn } from '../listen.js';
import { PeerConnection, type PeerConnectionEvents } from './peer-connection.js';

export interface MeshOptions {
  selfId: string;
  /**
   * Every member, self included; peers are named by index. The list given at start is sorted; a
   * member admitted later (joined) is appended, so no index ever changes.
   */
  members: string[];
  /** Where to dial each member (undefined for self, and for a joined member until its address is known). */
  addresses: Array<PeerAddress | undefined>;
  bindHost: string;
  port: number;
  secret: Uint8Array | undefined;
  clientPort: number;
  tls: ClusterConfig['tls'];
  logger: Logger;
}

export interface MeshEvents {
  /**
   * A peer that proved the cluster secret but is not a member yet (a node joining, or a seed this
   * node dialed to join): its new member index, or a reason to refuse it.
   */
  admit(peerId: string): number | string;
  onPeerUp(member: number): void;
  onPeerDown(member: number): void;
  onFrame(member: number, peek: EnvelopePeek, bytes: Buffer): void;
}

export class Mesh implements PeerConnectionEvents {
  private readonly connections: (PeerConnection | undefined)[];
  private readonly pending = new Set<PeerConnection>();
  private server: Server | undefined;
  private closing = false;
  private readonly dialTimers = new Map<number, NodeJS.Timeout>();
  private readonly backoffMs: number[];
  /** Bytes sent to each member, by envelope field number. */
  private readonly bytesOut: Float64Array[];
  /** Dial supervisors waiting for a peer that is connected through its own dial to go down. */
  private readonly parked = new Set<number>();
  readonly selfIndex: number;
  /** Bytes sent on accepted connections before the peer identified itself (its Hello). */
  private readonly unattributed = new Float64Array(ENVELOPE_FIELD_COUNTERS);
  /**
   * Wall-clock ms since when each member has had no connection: the mesh's creation for one never
   * reached, its last disconnect otherwise; 0 while connected (and for self).
   */
  private readonly downSinceMs: number[];

  constructor(
    private readonly options: MeshOptions,
    private readonly events: MeshEvents,
  ) {
    this.connections = options.members.map(() => undefined);
    this.backoffMs = options.members.map(() => PEER_RECONNECT_MS_BASE);
    this.bytesOut = options.members.map(() => new Float64Array(ENVELOPE_FIELD_COUNTERS));
    this.selfIndex = options.members.indexOf(options.selfId);
    const createdMs = Date.now();
    this.downSinceMs = options.members.map((_, m) => (m === this.selfIndex ? 0 : createdMs));
  }

  /** Listens for peers, then starts dialing every other member. Resolves once listening. */
  async start(): Promise<number> {
    const tls = this.options.tls;
    const server =
      tls === undefined
        ? createServer((socket) => this.accept(socket))
        : createTlsServer(
            {
              cert: tls.cert,
              key: tls.key,
              ca: tls.ca,
              requestCert: true,
              rejectUnauthorized: true,
              minVersion: 'TLSv1.2',
              handshakeTimeout: HANDSHAKE_TIMEOUT_MS,
            },
            (socket) => this.accept(socket),
          ).on('tlsClientError', (err: Error, socket: Socket) =>
            this.options.logger.warn(
              { remote: `${socket.remoteAddress}:${socket.remotePort}`, err: err.message },
              'peer TLS handshake failed',
            ),
          );
    this.server = server;
    const { port } = await listenOn(server, this.options.port, this.options.bindHost);
    for (let m = 0; m < this.options.members.length; m++) if (m !== this.selfIndex) this.dial(m);
    return port;
  }

  /**
   * Makes room for a member admitted at run time (the caller has appended it to `members`, and its
   * address, if known, to `addresses`); dials it when its address is known.
   */
  memberAdded(member: number): void {
    this.connections[member] = undefined;
    this.backoffMs[member] = PEER_RECONNECT_MS_BASE;
    this.bytesOut[member] = new Float64Array(ENVELOPE_FIELD_COUNTERS);
    this.downSinceMs[member] = Date.now();
    if (this.options.addresses[member] !== undefined) this.dial(member);
  }

  /** A member's address became known (a joined member): dial it whenever it is not connected. */
  addressKnown(member: number, address: PeerAddress): void {
    const had = this.options.addresses[member] !== undefined;
    this.options.addresses[member] = address;
    if (!had && !this.isUp(member)) this.dial(member);
  }

  /**
   * Dials a seed whose member id is not known yet (`--join`): the handshake proves the secret and
   * names it, and the mesh admits it (events.admit) like any peer. Retries with backoff until it is
   * connected once; resolves with the seed's member index.
   */
  dialSeed(address: PeerAddress): Promise<number> {
    return new Promise((resolve) => {
      let backoff = PEER_RECONNECT_MS_BASE;
      const attempt = (): void => {
        if (this.closing) return;
        const socket = this.openSocket(address);
        const timeout = setTimeout(
          () => socket.destroy(new Error('connect timed out')),
          PEER_CONNECT_TIMEOUT_MS,
        );
        const retry = (): void => {
          socket.destroy();
          setTimeout(attempt, backoff + Math.floor(Math.random() * (backoff / 2 + 1))).unref();
          backoff = Math.min(PEER_RECONNECT_MS_MAX, backoff * 2);
        };
        socket.once('error', () => {
          clearTimeout(timeout);
          retry();
        });
        socket.once(this.options.tls === undefined ? 'connect' : 'secureConnect', () => {
          clearTimeout(timeout);
          socket.removeAllListeners('error');
          const conn = new PeerConnection(socket, this.connectionOptions(true, undefined), {
            onEstablished: (c) => {
              this.onEstablished(c);
              const member = this.options.members.indexOf(c.peerId!);
              if (member !== -1 && this.connections[member] === c) resolve(member);
            },
            onFrame: (c, peek, bytes) => this.onFrame(c, peek, bytes),
            onClose: (c, reason) => {
              this.onClose(c, reason);
              if (c.peerId === undefined || this.options.members.indexOf(c.peerId) === -1) retry();
            },
          });
          this.pending.add(conn);
        });
        if (this.options.tls === undefined) (socket as Socket).connect(address.port, address.host);
      };
      attempt();
    });
  }

  isUp(member: number): boolean {
    return this.connections[member]?.established === true;
  }

  /** Wall-clock ms since when `member` has been disconnected; undefined while it is connected. */
  downSinceOf(member: number): number | undefined {
    return this.isUp(member) || member === this.selfIndex ? undefined : this.downSinceMs[member];
  }

  /** Bytes sent to `member` so far, by envelope field number. */
  bytesSentTo(member: number): Float64Array {
    return this.bytesOut[member];
  }

  /** The capabilities a connected peer advertised (0 when it is not connected). */
  capabilitiesOf(member: number): number {
    const conn = this.connections[member];
    return conn?.established === true ? conn.peerCapabilities : 0;
  }

  /** Bytes queued to a connected peer and not yet sent. */
  queuedBytesTo(member: number): number {
    return this.connections[member]?.queuedBytes ?? 0;
  }

  clientPortOf(member: number): number {
    return this.connections[member]?.peerClientPort ?? 0;
  }

  /** Sends an envelope to a connected peer; false when it is not connected. */
  send(member: number, envelope: Uint8Array): boolean {
    const conn = this.connections[member];
    if (conn === undefined || !conn.established) return false;
    conn.send(envelope);
    return true;
  }

  /** Sends a finished frame (length prefix included); false when `member` is not connected. */
  sendFrame(member: number, frame: Buffer): boolean {
    const conn = this.connections[member];
    if (conn === undefined || !conn.established) return false;
    conn.sendFrame(frame);
    return true;
  }

  /** Closes the connection to `member` for a protocol violation (it will be redialed). */
  drop(member: number, reason: string): void {
    this.connections[member]?.close(reason);
  }

  async close(): Promise<void> {
    this.closing = true;
    for (const timer of this.dialTimers.values()) clearTimeout(timer);
    this.dialTimers.clear();
    for (const conn of [...this.connections, ...this.pending]) conn?.close('node is shutting down');
    const server = this.server;
    this.server = undefined;
    if (server !== undefined) await new Promise<void>((resolve) => server.close(() => resolve()));
  }

  // --- PeerConnectionEvents --------------------------------------------------------------------

  onEstablished(conn: PeerConnection): void {
    this.pending.delete(conn);
    let member = this.options.members.indexOf(conn.peerId!);
    if (member === -1) {
      const admitted = this.events.admit(conn.peerId!);
      if (typeof admitted === 'string') return conn.close(`peer "${conn.peerId}" refused: ${admitted}`);
      member = admitted;
    }
    const existing = this.connections[member];
    if (existing !== undefined && existing !== conn && existing.established) {
      if (compareRank(existing.rank!, conn.rank!) >= 0) {
        return conn.close('authenticated duplicate connection lost election');
      }
      this.connections[member] = conn;
      existing.close('replaced by a connection of higher rank');
      this.events.onPeerDown(member);
    } else {
      this.connections[member] = conn;
    }
    this.backoffMs[member] = PEER_RECONNECT_MS_BASE;
    this.downSinceMs[member] = 0;
    this.options.logger.info({ peer: conn.peerId, remote: conn.remote }, 'peer connected');
    this.events.onPeerUp(member);
  }

  onFrame(conn: PeerConnection, peek: EnvelopePeek, bytes: Buffer): void {
    const member = this.options.members.indexOf(conn.peerId!);
    if (this.connections[member] !== conn) return;
    this.events.onFrame(member, peek, bytes);
  }

  onClose(conn: PeerConnection, reason: string): void {
    this.pending.delete(conn);
    const member = conn.peerId === undefined ? -1 : this.options.members.indexOf(conn.peerId);
    const current = member !== -1 && this.connections[member] === conn;
    if (current) {
      this.connections[member] = undefined;
      this.downSinceMs[member] = Date.now();
      this.options.logger.warn({ peer: conn.peerId, remote: conn.remote, reason }, 'peer disconnected');
      this.events.onPeerDown(member);
      // A supervisor parked behind this connection redials now.
      if (this.parked.delete(member)) this.scheduleDial(member, 0);
    } else if (conn.handshakeFailure !== undefined) {
      // Both ends of a misconfigured pair say so, each time they dial: the reason is the operator's.
      const { peer, differs } = conn.handshakeFailure;
      this.options.logger.warn({ peer, remote: conn.remote, reason, differs }, 'peer handshake failed');
    } else if (!this.closing) {
      this.options.logger.warn({ peer: conn.peerId, remote: conn.remote, reason }, 'peer connection closed');
    }
  }

  // --- connections -------------------------------------------------------------------------------

  private accept(socket: Socket): void {
    if (this.closing) {
      socket.destroy();
      return;
    }
    const conn = new PeerConnection(socket, this.connectionOptions(false, undefined), this);
    // Counted as the peer's once it says who it is.
    conn.onIdentified = (id) => {
      const m = this.options.members.indexOf(id);
      if (m !== -1) conn.countInto(this.bytesOut[m]);
    };
    this.pending.add(conn);
  }

  private connectionOptions(weDialed: boolean, expectedPeerId: string | undefined, member = -1) {
    const o = this.options;
    return {
      bytesOut: member === -1 ? this.unattributed : this.bytesOut[member],
      localId: o.selfId,
      secret: o.secret,
      weDialed,
      expectedPeerId,
      clientPort: o.clientPort,
      logger: o.logger,
    };
  }

  /** One dial attempt to `member`; on failure or loss the supervisor schedules the next. */
  private dial(member: number): void {
    if (this.closing) return;
    if (this.isUp(member)) {
      // Connected through the peer's own dial: wait until that connection goes away.
      this.parked.add(member);
      return;
    }
    const address = this.options.addresses[member];
    if (address === undefined) return; // a joined member whose address is not known yet: it dialed us
    const tls = this.options.tls;
    const socket = this.openSocket(address);
    const timeout = setTimeout(() => socket.destroy(new Error('connect timed out')), PEER_CONNECT_TIMEOUT_MS);
    const events: PeerConnectionEvents = {
      onEstablished: (c) => this.onEstablished(c),
      onFrame: (c, peek, bytes) => this.onFrame(c, peek, bytes),
      onClose: (c, reason) => {
        this.onClose(c, reason);
        this.afterDial(member);
      },
    };
    const onConnectError = (err: Error) => {
      clearTimeout(timeout);
      if (tls !== undefined && !/ECONNREFUSED|connect timed out/.test(err.message)) {
        this.options.logger.warn(
          { peer: this.options.members[member], err: err.message },
          'peer TLS handshake failed',
        );
      }
      this.afterDial(member, socket);
    };
    socket.once('error', onConnectError);
    socket.once(tls === undefined ? 'connect' : 'secureConnect', () => {
      clearTimeout(timeout);
      socket.off('error', onConnectError);
      const conn = new PeerConnection(
        socket,
        this.connectionOptions(true, this.options.members[member], member),
        events,
      );
      this.pending.add(conn);
    });
    if (tls === undefined) socket.connect(address.port, address.host);
  }

  /** A socket dialing `address`: plain, or TLS presenting the client certificate. */
  private openSocket(address: PeerAddress): Socket {
    const tls = this.options.tls;
    if (tls === undefined) return new Socket();
    return connectTls({
      host: address.host,
      port: address.port,
      cert: tls.clientCert,
      key: tls.clientKey,
      ca: tls.ca,
      minVersion: 'TLSv1.2',
      // The member is proven by the cluster secret's handshake; the CA admits the certificate.
      checkServerIdentity: () => undefined,
    });
  }

  /** After a dial ends (failed, lost the election, or disconnected): back off and dial again. */
  private afterDial(member: number, failed?: Socket): void {
    failed?.destroy();
    if (this.closing || this.dialTimers.has(member)) return;
    if (this.isUp(member)) {
      this.parked.add(member);
      return;
    }
    const base = this.backoffMs[member];
    this.backoffMs[member] = Math.min(PEER_RECONNECT_MS_MAX, base * 2);
    this.scheduleDial(member, base + Math.floor(Math.random() * (base / 2 + 1)));
  }

  private scheduleDial(member: number, delayMs: number): void {
    if (this.closing || this.dialTimers.has(member)) return;
    this.dialTimers.set(
      member,
      setTimeout(() => {
        this.dialTimers.delete(member);
        this.dial(member);
      }, delayMs),
    );
  }
}
