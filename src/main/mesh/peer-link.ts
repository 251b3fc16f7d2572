// The main thread's end of operations forwarded to one peer (DESIGN.md "Placement": any node
// accepts any request and forwards it to the first serving replica). It looks like a worker link to
// the dispatcher — each request is encoded the same way, straight into the frame being built — and
// every request of one event-loop turn leaves in one ForwardedOps frame; results come back in
// ForwardedResults frames and reach their handlers in place, without a copy.
//
// When the peer goes away, writes and reads it held are retried down the replica list with the same
// stamped version (an applied write answers AlreadyPresent the second time); read-modify-writes fail
// with a Network error, since they may or may not have been applied; replica-wait fences (WAIT,
// replica acknowledgements) fail too: only the replica that took the writes can say how far they
// reached.

import { readU16LE } from '../../core/bytes.js';
import { backpressure, networkError, type TesseraError } from '../../core/errors.js';
import {
  FORWARD_BATCH_FLUSH_BYTES,
  FORWARD_IN_FLIGHT_MAX,
  FORWARD_TIMEOUT_CHECK_MS,
  FORWARD_TIMEOUT_MS,
} from '../../core/limits.js';
import { OpKind } from '../../core/ops.js';
import { EnvelopeField, forEachField, ListFrameBuilder } from '../../core/peer-frame.js';
import { checkResult, requestReplicaWait, resultId, setRequestId } from '../../threads/op-codec.js';
import type { ResultHandler } from '../worker-link.js';

/** What a peer link needs from the cluster around it. */
export interface PeerLinkHost {
  /** Sends a finished frame; false when the peer is not connected. */
  sendFrame(member: number, frame: Buffer): boolean;
  isUp(member: number): boolean;
  /** Sends a request (already encoded, stamped) again, to the fragment's current first replica. */
  resubmit(fragment: number, request: Buffer, handler: ResultHandler<unknown>, token: unknown): void;
}

interface InFlight {
  handler: ResultHandler<unknown>;
  token: unknown;
  /** A copy of the request, for a retry elsewhere. */
  request: Buffer;
  sentAtMs: number;
}

/** ForwardedOps.ops and ForwardedResults.results field numbers; ForwardedOps.hops and .generation. */
const OPS_FIELD = 2;
export const HOPS_FIELD = 1;
export const GENERATION_FIELD = 3;
export const RESULTS_FIELD = 1;

export class PeerLink {
  /** Request buffer: the dispatcher encodes at the offset `begin` returned. */
  buffer: Buffer;
  reqId = 0;
  private nextReqId = 1;
  private readonly batch = new ListFrameBuilder(EnvelopeField.ForwardedOps, OPS_FIELD);
  private readonly relays = new ListFrameBuilder(EnvelopeField.ForwardedOps, OPS_FIELD);
  private pendingAt = 0;
  private pendingBytes = 0;
  private pendingHandler: ResultHandler<unknown> | undefined;
  private pendingToken: unknown;
  private flushScheduled = false;
  private readonly flushTask = (): void => this.flush();
  private readonly inFlight = new Map<number, InFlight>();
  private timer: NodeJS.Timeout | undefined;

  constructor(
    readonly member: number,
    readonly peerId: string,
    private readonly host: PeerLinkHost,
  ) {
    this.buffer = this.batch.buffer;
  }

  get pending(): number {
    return this.inFlight.size;
  }

  canAccept(): boolean {
    return this.host.isUp(this.member) && this.inFlight.size < FORWARD_IN_FLIGHT_MAX;
  }

  refusal(): TesseraError {
    if (!this.host.isUp(this.member))
      return networkError(`peer ${this.peerId} is disconnected or not answering membership probes`);
    return backpressure(`${FORWARD_IN_FLIGHT_MAX} operations already wait on peer ${this.peerId}`);
  }

  begin<T>(handler: ResultHandler<T>, token: T, bytes: number): number {
    this.pendingAt = this.batch.reserve(bytes);
    this.buffer = this.batch.buffer;
    this.reqId = this.takeId();
    this.pendingBytes = bytes;
    this.pendingHandler = handler as ResultHandler<unknown>;
    this.pendingToken = token;
    return this.pendingAt;
  }

  end(): void {
    const request = Buffer.from(this.buffer.subarray(this.pendingAt, this.pendingAt + this.pendingBytes));
    this.track(this.reqId, this.pendingHandler!, this.pendingToken, request);
    this.pendingHandler = undefined;
    this.pendingToken = undefined;
    this.scheduleFlush();
  }

  /**
   * Sends an encoded request (a retry, hops 0, or a relay, hops > 0, of a fragment whose table
   * generation the relaying node routed it by is `generation`) under a fresh request id; the
   * request's own bytes are left as they are.
   */
  forward(
    request: Buffer,
    hops: number,
    generation: number,
    handler: ResultHandler<unknown>,
    token: unknown,
  ): void {
    const reqId = this.takeId();
    const builder = hops === 0 ? this.batch : this.relays;
    const at = builder.reserve(request.length);
    builder.buffer.set(request, at);
    setRequestId(builder.buffer, at, reqId);
    const copy = Buffer.from(builder.buffer.subarray(at, at + request.length));
    this.track(reqId, handler, token, copy);
    if (hops === 0) this.scheduleFlush();
    else this.send(this.relays.finish(HOPS_FIELD, hops, GENERATION_FIELD, generation));
  }

  /** A ForwardedResults message (`bytes[start, end)`) from the peer; false when malformed. */
  onResults(bytes: Buffer, start: number, end: number): boolean {
    let malformed = false;
    const ok = forEachField(bytes, start, end, RESULTS_FIELD, (at, stop) => {
      if (malformed || checkResult(bytes, at, stop - at) !== undefined) {
        malformed = true;
        return;
      }
      const reqId = resultId(bytes, at);
      const entry = this.inFlight.get(reqId);
      if (entry === undefined) return;
      this.inFlight.delete(reqId);
      entry.handler.onResult(entry.token, bytes, at, stop - at);
    });
    return ok && !malformed;
  }

  /** The connection went away: retry what can be retried elsewhere, fail the rest. */
  onDisconnect(): void {
    if (this.batch.count > 0) this.batch.finish();
    const held = [...this.inFlight.values()];
    this.inFlight.clear();
    for (const entry of held) {
      if (entry.request[0] === OpKind.Fence && requestReplicaWait(entry.request, 0)) {
        // Only the replica that took the writes can say how far they reached: none other may answer.
        // (A write that waits for its replicas carries itself: the replica it goes to takes it.)
        entry.handler.onFailure(
          entry.token,
          networkError(`peer ${this.peerId} disconnected before it confirmed its replicas`),
        );
      } else if (entry.request[0] === OpKind.Modify) {
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

  private takeId(): number {
    const id = this.nextReqId;
    this.nextReqId = this.nextReqId >= 0xffffffff ? 1 : this.nextReqId + 1;
    return id;
  }

  private track(reqId: number, handler: ResultHandler<unknown>, token: unknown, request: Buffer): void {
    this.inFlight.set(reqId, { handler, token, request, sentAtMs: Date.now() });
    if (this.timer === undefined) this.timer = setInterval(() => this.expire(), FORWARD_TIMEOUT_CHECK_MS);
  }

  private scheduleFlush(): void {
    if (this.batch.bytes >= FORWARD_BATCH_FLUSH_BYTES) return this.flush();
    if (this.flushScheduled) return;
    this.flushScheduled = true;
    queueMicrotask(this.flushTask);
  }

  private flush(): void {
    this.flushScheduled = false;
    if (this.batch.count > 0) this.send(this.batch.finish());
  }

  /** A frame that cannot leave fails over like a disconnect (the mesh reports that one too). */
  private send(frame: Buffer): void {
    if (!this.host.sendFrame(this.member, frame)) this.onDisconnect();
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

  /**
   * Stops the expiry check once a whole period passed with nothing in flight — not at each answer:
   * one request at a time would start and stop a timer per request.
   */
  private stopTimerIfIdle(): void {
    if (this.inFlight.size === 0 && this.timer !== undefined) {
      clearInterval(this.timer);
      this.timer = undefined;
    }
  }
}
