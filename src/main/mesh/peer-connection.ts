// One TCP connection to a peer: frames in and out (src/core/peer-frame.ts), the handshake
// (src/core/handshake.ts) with its deadline, and an outbound byte bound. Any protocol violation
// closes the connection with a logged reason; the mesh decides what a closed connection means.

import { randomBytes } from 'node:crypto';
import type { Socket } from 'node:net';
import type { Logger } from 'pino';
import type { HandshakeAction } from '../../core/handshake.js';
import {
  type ConnectionRank,
  freshHello,
  HANDSHAKE_CHALLENGE_BYTES,
  HandshakeMachine,
} from '../../core/handshake.js';
import { FRAME_BYTES_MAX, HANDSHAKE_TIMEOUT_MS, PEER_OUTBOUND_BYTES_MAX } from '../../core/limits.js';
import {
  EnvelopeField,
  type EnvelopePeek,
  FRAME_PREFIX_BYTES,
  FrameReader,
  frameOf,
  peekEnvelope,
} from '../../core/peer-frame.js';
import { decodeEnvelope, encodeEnvelope } from '../../threads/peer-messages.js';

/** What a peer that closes in the middle of the handshake most likely disagrees with us about. */
const REFUSED_BY_PEER =
  'cluster secret or member list differs (the peer refused this node; its log says why)';

export interface PeerConnectionOptions {
  localId: string;
  secret: Uint8Array | undefined;
  weDialed: boolean;
  /** The member a dialer meant to reach; a different id fails the handshake. */
  expectedPeerId: string | undefined;
  /** Our RESP port, told to peers for CLUSTER SLOTS. */
  clientPort: number;
  logger: Logger;
  /** Bytes sent, by envelope field number (the mesh keeps one per peer across reconnects). */
  bytesOut: Float64Array;
}

export interface PeerConnectionEvents {
  /** The handshake completed; the mesh runs the election. */
  onEstablished(conn: PeerConnection): void;
  /** An application frame (after the handshake). `bytes` is the whole envelope. */
  onFrame(conn: PeerConnection, peek: EnvelopePeek, bytes: Buffer): void;
  onClose(conn: PeerConnection, reason: string): void;
}

export class PeerConnection {
  peerId: string | undefined;
  rank: ConnectionRank | undefined;
  peerClientPort = 0;
  /** What the peer advertised in its Hello (authenticated by the handshake's transcript). */
  peerCapabilities = 0;
  closed = false;
  private readonly reader = new FrameReader();
  private readonly handshake: HandshakeMachine;
  private handshakeTimer: NodeJS.Timeout | undefined;
  private corked = false;
  private bytesOut: Float64Array;
  /** Called once the peer's Hello names it (listener side). */
  onIdentified: ((peerId: string) => void) | undefined;
  /** The peer's address, read at connect: a destroyed socket no longer knows it. */
  readonly remote: string;
  /** The member the peer is or claims to be (unproven before the handshake completes). */
  private claimedId: string | undefined;
  /** Set when the handshake failed or the peer refused it: whom, and what most likely differs. */
  handshakeFailure: { peer: string | undefined; differs: string } | undefined;

  constructor(
    readonly socket: Socket,
    private readonly options: PeerConnectionOptions,
    private readonly events: PeerConnectionEvents,
  ) {
    let challenge = randomBytes(HANDSHAKE_CHALLENGE_BYTES);
    while (challenge.every((b) => b === 0)) challenge = randomBytes(HANDSHAKE_CHALLENGE_BYTES);
    this.handshake = new HandshakeMachine({
      localId: options.localId,
      secret: options.secret,
      weDialed: options.weDialed,
      expectedPeerId: options.expectedPeerId,
      localHello: freshHello(options.localId, challenge),
    });
    this.bytesOut = options.bytesOut;
    this.remote = `${socket.remoteAddress}:${socket.remotePort}`;
    this.claimedId = options.expectedPeerId;
    socket.setNoDelay(true);
    socket.on('data', (chunk: Buffer) => this.onData(chunk));
    socket.on('error', (err) => this.close(`socket error: ${err.message}`));
    socket.on('close', () => this.close('connection closed by peer'));
    this.handshakeTimer = setTimeout(
      () => this.close(`handshake not completed within ${HANDSHAKE_TIMEOUT_MS} ms`),
      HANDSHAKE_TIMEOUT_MS,
    );
    this.carryOut(this.handshake.start());
  }

  get established(): boolean {
    return this.handshake.state === 'established' && !this.closed;
  }

  /** Sends one encoded envelope; closes the connection when the peer does not keep up. */
  send(envelope: Uint8Array): void {
    this.sendFrame(frameOf(envelope));
  }

  /** Sends a finished frame (length prefix included). */
  sendFrame(frame: Buffer): void {
    if (this.closed) return;
    if (this.socket.writableLength > PEER_OUTBOUND_BYTES_MAX) {
      this.close(`peer is not reading: more than ${PEER_OUTBOUND_BYTES_MAX} bytes queued`);
      return;
    }
    // Frames written in one turn leave in one write.
    if (!this.corked) {
      this.corked = true;
      this.socket.cork();
      process.nextTick(() => {
        this.corked = false;
        this.socket.uncork();
      });
    }
    // Every message field number is below 16, so the envelope's first byte is its tag.
    this.bytesOut[frame[FRAME_PREFIX_BYTES] >> 3] += frame.length;
    this.socket.write(frame);
  }

  /** Bytes handed to the socket and not yet sent. */
  get queuedBytes(): number {
    return this.socket.writableLength;
  }

  /** Counts later bytes into `counters` (the identified peer's). */
  countInto(counters: Float64Array): void {
    this.bytesOut = counters;
  }

  close(reason: string): void {
    if (this.closed) return;
    this.closed = true;
    if (this.handshakeTimer !== undefined) clearTimeout(this.handshakeTimer);
    if (this.handshake.state === 'awaiting-auth' && this.handshakeFailure === undefined) {
      // The peer read our Hello and left without proving itself: it refused us, most likely for
      // our proof. Its own log names the reason.
      this.handshakeFailure = { peer: this.claimedId, differs: REFUSED_BY_PEER };
    }
    // Frames written this turn (our HelloAuth, when our check of theirs failed) still leave, so the
    // peer can check our proof and log its own reason rather than a bare close.
    if (this.corked) this.socket.uncork();
    this.socket.destroy();
    this.events.onClose(this, reason);
  }

  private onData(chunk: Buffer): void {
    if (this.closed) return;
    this.reader.push(chunk);
    for (;;) {
      const frame = this.reader.next();
      if (frame === undefined) return;
      if (frame instanceof Error) return this.close(frame.message);
      this.onFrameBytes(frame);
      if (this.closed) return;
    }
  }

  private onFrameBytes(bytes: Buffer): void {
    const peek = peekEnvelope(bytes);
    if (peek === undefined) return this.close('malformed envelope');
    if (this.handshake.state === 'established') {
      if (peek.field === EnvelopeField.Hello || peek.field === EnvelopeField.HelloAuth) {
        return this.close('duplicate or post-handshake Hello');
      }
      return this.events.onFrame(this, peek, bytes);
    }
    if (peek.field !== EnvelopeField.Hello && peek.field !== EnvelopeField.HelloAuth) {
      return this.carryOut(this.handshake.onOtherFrame());
    }
    let envelope: ReturnType<typeof decodeEnvelope>;
    try {
      envelope = decodeEnvelope(bytes);
    } catch (err) {
      return this.close(`malformed handshake frame: ${(err as Error).message}`);
    }
    if (envelope.hello !== undefined) {
      this.peerClientPort = envelope.hello.clientPort;
      this.claimedId ??= envelope.hello.nodeId;
      this.onIdentified?.(envelope.hello.nodeId);
      this.carryOut(this.handshake.onHello(envelope.hello));
    } else if (envelope.helloAuth !== undefined) {
      this.carryOut(this.handshake.onHelloAuth(envelope.helloAuth.authTag));
    }
  }

  private carryOut(actions: HandshakeAction[]): void {
    for (const action of actions) {
      switch (action.kind) {
        case 'send-hello':
          this.send(encodeEnvelope({ hello: { ...action.hello, clientPort: this.options.clientPort } }));
          break;
        case 'send-auth':
          this.send(encodeEnvelope({ helloAuth: { authTag: action.authTag } }));
          break;
        case 'fail':
          this.handshakeFailure = { peer: this.claimedId, differs: action.differs };
          return this.close(action.reason);
        case 'established':
          if (this.handshakeTimer !== undefined) clearTimeout(this.handshakeTimer);
          this.handshakeTimer = undefined;
          this.peerId = action.peerId;
          this.rank = action.rank;
          this.peerCapabilities = action.peerCapabilities;
          this.reader.limit = FRAME_BYTES_MAX;
          this.events.onEstablished(this);
          break;
      }
    }
  }
}
