// The main thread's end of operations forwarded to one peer (DESIGN.md "Placement": any node
// accepts any request and forwards it to the first serving replica). It looks like a worker link to
// the dispatcher — the request is encoded the same way — and carries each request to the peer as a
// ForwardedOp, whose ForwardedResult holds the worker's exact result record.
//
// When the peer goes away, writes and reads it held are retried down the replica list with the same
// stamped version (an applied write answers AlreadyPresent the second time); read-modify-writes fail
// with a Network error, since they may or may not have been applied.

import { readU16LE } from '../../core/bytes.js';
import { backpressure, networkError, type TesseraError } from '../../core/errors.js';
import { FORWARD_IN_FLIGHT_MAX, FORWARD_TIMEOUT_MS } from '../../core/limits.js';
import { OpKind } from '../../core/ops.js';
import { encodeEnvelope } from '../../threads/peer-messages.js';
import type { ResultHandler } from '../worker-link.js';

/** What a peer link needs from the cluster around it. */
export interface PeerLinkHost {
  send(member: number, envelope: Uint8Array): boolean;
  isUp(member: number): boolean;
  /** Sends a request (already encoded, stamped) again, to the fragment's current first replica. */
  resubmit(fragment: number, request: Buffer, handler: ResultHandler<unknown>, token: unknown): void;
}

interface InFlight {
  handler: ResultHandler<unknown>;
  token: unknown;
  request: Buffer;
  sentAtMs: number;
}

const INITIAL_SCRATCH_BYTES = 64 * 1024;
/** How often forwarded requests are checked against FORWARD_TIMEOUT_MS. */
const TIMEOUT_CHECK_MS = 500;

export class PeerLink {
  /** Request buffer: the dispatcher encodes at the offset `begin` returned (always 0). */
  buffer = Buffer.allocUnsafe(INITIAL_SCRATCH_BYTES);
  reqId = 0;
  private nextReqId = 1;
  private pendingBytes = 0;
  private pendingHandler: ResultHandler<unknown> | undefined;
  private pendingToken: unknown;
  private readonly inFlight = new Map<number, InFlight>();
  private timer: NodeJS.Timeout | undefined;

  constructor(
    readonly member: number,
    readonly peerId: string,
    private readonly host: PeerLinkHost,
  ) {}

  get pending(): number {
    return this.inFlight.size;
  }

  canAccept(): boolean {
    return this.host.isUp(this.member) && this.inFlight.size < FORWARD_IN_FLIGHT_MAX;
  }

  refusal(): TesseraError {
    if (!this.host.isUp(this.member)) return networkError(`peer ${this.peerId} is not connected`);
    return backpressure(`${FORWARD_IN_FLIGHT_MAX} operations already wait on peer ${this.peerId}`);
  }

  begin<T>(handler: ResultHandler<T>, token: T, bytes: number): number {
    if (this.buffer.length < bytes) this.buffer = Buffer.allocUnsafe(Math.max(bytes, this.buffer.length * 2));
    this.reqId = this.nextReqId;
    this.nextReqId = this.nextReqId >= 0xffffffff ? 1 : this.nextReqId + 1;
    this.pendingBytes = bytes;
    this.pendingHandler = handler as ResultHandler<unknown>;
    this.pendingToken = token;
    return 0;
  }

  end(): void {
    const request = Buffer.from(this.buffer.subarray(0, this.pendingBytes));
    this.forward(request, 0, this.pendingHandler!, this.pendingToken);
    this.pendingHandler = undefined;
    this.pendingToken = undefined;
  }

  /** Sends an encoded request; `hops` counts the nodes it already passed. */
  forward(request: Buffer, hops: number, handler: ResultHandler<unknown>, token: unknown): void {
    const reqId = this.reqId === 0 ? this.nextId() : this.reqId;
    this.reqId = 0;
    const fragment = readU16LE(request, 2);
    this.inFlight.set(reqId, { handler, token, request, sentAtMs: Date.now() });
    const sent = this.host.send(
      this.member,
      encodeEnvelope({ forwardedOp: { fragment, reqId, hops, op: request } }),
    );
    if (!sent) {
      this.inFlight.delete(reqId);
      handler.onFailure(token, networkError(`peer ${this.peerId} is not connected`));
      return;
    }
    if (this.timer === undefined) this.timer = setInterval(() => this.expire(), TIMEOUT_CHECK_MS);
  }

  /** The result of request `reqId`, from the peer. */
  onResult(reqId: number, result: Buffer): void {
    const entry = this.inFlight.get(reqId);
    if (entry === undefined) return;
    this.inFlight.delete(reqId);
    this.stopTimerIfIdle();
    entry.handler.onResult(entry.token, result, 0, result.length);
  }

  /** The connection went away: retry what can be retried elsewhere, fail the rest. */
  onDisconnect(): void {
    const held = [...this.inFlight.values()];
    this.inFlight.clear();
    this.stopTimerIfIdle();
    for (const entry of held) {
      const kind = entry.request[0];
      if (kind === OpKind.Modify) {
        entry.handler.onFailure(
          entry.token,
          networkError(`peer ${this.peerId} disconnected; the operation may or may not have been applied`),
        );
      } else {
        this.host.resubmit(readU16LE(entry.request, 2), entry.request, entry.handler, entry.token);
      }
    }
  }

  close(): void {
    if (this.timer !== undefined) clearInterval(this.timer);
    this.timer = undefined;
  }

  private nextId(): number {
    const id = this.nextReqId;
    this.nextReqId = this.nextReqId >= 0xffffffff ? 1 : this.nextReqId + 1;
    return id;
  }

  private expire(): void {
    const deadline = Date.now() - FORWARD_TIMEOUT_MS;
    for (const [reqId, entry] of this.inFlight) {
      if (entry.sentAtMs > deadline) continue;
      this.inFlight.delete(reqId);
      entry.handler.onFailure(
        entry.token,
        networkError(
          `peer ${this.peerId} did not answer within ${FORWARD_TIMEOUT_MS} ms; the operation may or may not have been applied`,
        ),
      );
    }
    this.stopTimerIfIdle();
  }

  private stopTimerIfIdle(): void {
    if (this.inFlight.size === 0 && this.timer !== undefined) {
      clearInterval(this.timer);
      this.timer = undefined;
    }
  }
}
