// Admin requests between nodes over the peer mesh (proto AdminMessage, src/threads/admin-wire.ts):
// a change forwarded to the coordinator, a member asked for its metrics sample. Each request this
// node asks is pending under its id until the peer's reply with that id, its deadline, or the loss
// of the connection to that peer, whichever comes first, and is answered exactly once: with the
// peer's answer, `DeadlineExceeded`, or `Failed`. Replies nobody waits for (late, duplicated, from
// another peer) are counted and dropped. Requests from peers go to the handler the node installs,
// a bounded number at once. Time comes from a DriverClock and sockets are behind AdminExchangeIo, so
// a test drives this very class.

import type { DriverClock } from '../../core/clock.js';
import { ADMIN_REQUESTS_PENDING_MAX, ADMIN_REQUESTS_SERVING_MAX } from '../../core/limits.js';
import {
  type AdminAnswer,
  type AdminRequest,
  type AdminStatus,
  decodeAdminMessage,
  encodeAdminReply,
  encodeAdminRequest,
} from '../../threads/admin-wire.js';

export interface AdminExchangeIo {
  /** Sends an envelope on the peer connection to `nodeId`; false when none is open. */
  sendEnvelope(nodeId: string, envelope: Uint8Array): boolean;
}

/** Serves a request peer `from` asked of this node. */
export type AdminHandler = (from: string, request: AdminRequest) => Promise<AdminAnswer>;

export interface AdminExchangeLimits {
  /** Requests asked and not answered at once (ADMIN_REQUESTS_PENDING_MAX). */
  pendingMax: number;
  /** Peers' requests served at once (ADMIN_REQUESTS_SERVING_MAX). */
  servingMax: number;
}

interface PendingRequest {
  nodeId: string;
  /** How this node's own answers name the peer (`the coordinator a`). */
  peerName: string;
  deadlineMs: number;
  /** How long it was given, for the DeadlineExceeded message. */
  timeoutMs: number;
  resolve: (answer: AdminAnswer) => void;
}

export interface AdminExchangeCounters {
  asked: number;
  answered: number;
  expired: number;
  /** Answered Failed: the connection to the peer was lost (or closed) before it answered. */
  lost: number;
  /** Replies no pending request was waiting for: after the deadline, twice, or from another peer. */
  unmatchedReplies: number;
  served: number;
  /** Peers' requests answered Failed at once: ADMIN_REQUESTS_SERVING_MAX were being served. */
  refusedBusy: number;
}

const answer = (status: AdminStatus, message: string): AdminAnswer => ({ status, message, result: {} });

export class AdminExchange {
  /** Serves peers' requests; until the node installs it, they are answered `Failed`. */
  handler: AdminHandler | undefined;
  readonly counters: AdminExchangeCounters = {
    asked: 0,
    answered: 0,
    expired: 0,
    lost: 0,
    unmatchedReplies: 0,
    served: 0,
    refusedBusy: 0,
  };
  /** Invariant: every entry's promise is unresolved; an entry leaves the map as it is resolved. */
  private readonly pending = new Map<number, PendingRequest>();
  private lastId = 0;
  private serving = 0;
  private closed = false;
  private readonly wake = (): void => this.expire();

  constructor(
    private readonly selfId: string,
    private readonly io: AdminExchangeIo,
    private readonly clock: DriverClock,
    private readonly limits: AdminExchangeLimits = {
      pendingMax: ADMIN_REQUESTS_PENDING_MAX,
      servingMax: ADMIN_REQUESTS_SERVING_MAX,
    },
  ) {}

  /** Requests asked and not answered yet. */
  get pendingCount(): number {
    return this.pending.size;
  }

  /**
   * Asks `nodeId`; resolves with its answer, or `DeadlineExceeded` after `timeoutMs`, or `Failed`
   * when it is not connected, the connection is lost first, or too many requests are in flight;
   * those answers name the peer as `peerName`. Never rejects.
   */
  ask(nodeId: string, request: AdminRequest, timeoutMs: number, peerName = nodeId): Promise<AdminAnswer> {
    if (this.closed) return Promise.resolve(answer('Failed', `node ${this.selfId} is shutting down`));
    if (this.pending.size >= this.limits.pendingMax) {
      return Promise.resolve(
        answer(
          'Failed',
          `${this.pending.size} admin requests to peers are in flight, the most a node keeps; try again`,
        ),
      );
    }
    const id = this.nextId();
    const envelope = encodeAdminRequest(id, request);
    if (typeof envelope === 'string') return Promise.resolve(answer('BadRequest', envelope));
    this.counters.asked++;
    const deadlineMs = this.clock.nowMs() + timeoutMs;
    const reply = new Promise<AdminAnswer>((resolve) =>
      this.pending.set(id, { nodeId, peerName, deadlineMs, timeoutMs, resolve }),
    );
    if (!this.io.sendEnvelope(nodeId, envelope)) {
      this.settle(id, answer('Failed', `node ${this.selfId} is not connected to ${peerName}`));
    } else {
      this.armTimer();
    }
    return reply;
  }

  /** An admin envelope from peer `from`; the reason when malformed (the connection is closed). */
  onEnvelope(from: string, bytes: Uint8Array): string | undefined {
    const decoded = decodeAdminMessage(bytes);
    if (decoded.kind === 'malformed') return decoded.reason;
    const message = decoded.message;
    if (message.kind === 'request') {
      this.serve(from, message.id, message.request);
      return undefined;
    }
    const waiting = this.pending.get(message.id);
    if (waiting === undefined || waiting.nodeId !== from) {
      this.counters.unmatchedReplies++;
      return undefined;
    }
    this.counters.answered++;
    this.settle(message.id, message.answer);
    this.armTimer();
    return undefined;
  }

  /** The connection to `nodeId` closed: what it was asked will not be answered. */
  connectionLost(nodeId: string): void {
    for (const [id, waiting] of this.pending) {
      if (waiting.nodeId !== nodeId) continue;
      this.counters.lost++;
      this.settle(id, answer('Failed', `the connection to ${waiting.peerName} was lost before it answered`));
    }
    this.armTimer();
  }

  /** Answers every pending request `Failed` and serves no more. */
  close(): void {
    this.closed = true;
    this.clock.clearTimer();
    for (const id of [...this.pending.keys()]) {
      this.counters.lost++;
      this.settle(id, answer('Failed', `node ${this.selfId} is shutting down`));
    }
  }

  private serve(from: string, id: number, request: AdminRequest): void {
    const handler = this.handler;
    if (this.closed || handler === undefined) {
      return this.reply(from, id, answer('Failed', `node ${this.selfId} is not serving admin requests yet`));
    }
    if (this.serving >= this.limits.servingMax) {
      this.counters.refusedBusy++;
      return this.reply(
        from,
        id,
        answer(
          'Failed',
          `node ${this.selfId} is serving ${this.serving} admin requests, the most at once; try again`,
        ),
      );
    }
    this.serving++;
    this.counters.served++;
    handler(from, request)
      .catch((err: Error) => answer('Failed', `node ${this.selfId} failed to serve it: ${err.message}`))
      .then((served) => {
        this.serving--;
        this.reply(from, id, served);
      });
  }

  private reply(to: string, id: number, served: AdminAnswer): void {
    // A peer that went away is not waiting any more: its own side answers Failed.
    if (!this.closed) this.io.sendEnvelope(to, encodeAdminReply(id, served));
  }

  /** Answers pending request `id` (which leaves the map first, so it is answered once). */
  private settle(id: number, settled: AdminAnswer): void {
    const waiting = this.pending.get(id);
    if (waiting === undefined) return;
    this.pending.delete(id);
    waiting.resolve(settled);
  }

  private expire(): void {
    const nowMs = this.clock.nowMs();
    for (const [id, waiting] of this.pending) {
      if (waiting.deadlineMs > nowMs) continue;
      this.counters.expired++;
      this.settle(
        id,
        answer('DeadlineExceeded', `${waiting.peerName} did not answer within ${waiting.timeoutMs} ms`),
      );
    }
    this.armTimer();
  }

  /** The timer at the earliest deadline pending, none when nothing is. */
  private armTimer(): void {
    if (this.closed) return;
    let earliestMs = Number.POSITIVE_INFINITY;
    for (const waiting of this.pending.values()) earliestMs = Math.min(earliestMs, waiting.deadlineMs);
    if (Number.isFinite(earliestMs)) this.clock.setTimer(earliestMs, this.wake);
    else this.clock.clearTimer();
  }

  /** A 32-bit id no pending request holds (0 is proto3's absent value, never used). */
  private nextId(): number {
    do {
      this.lastId = this.lastId >= 0xffff_ffff ? 1 : this.lastId + 1;
    } while (this.pending.has(this.lastId));
    return this.lastId;
  }
}
