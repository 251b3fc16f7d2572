// The main thread's side of waiting for replica acknowledgements (WAIT, WAITAOF, writes with
// replica acks): it asks the serving replica of each fragment a connection wrote — its worker here,
// or another node through forwarding, in order behind the writes sent before — with a replica-wait
// fence, and gathers the answers in a WaitRound (src/core/replica-acks.ts). One ask waits at most
// REPLICA_WAIT_ROUND_MS_MAX at the serving node (a forwarded one must answer before its forwarding
// gives up); a longer wait asks again, as long as the serving node waited its whole time. A write
// that waits for its replicas (GatedWrite) carries its first ask itself: its serving replica answers
// it once they acknowledged it; a longer wait goes on with fences.

import { replicaTimeout, type TesseraError } from '../core/errors.js';
import type { FragmentSet } from '../core/fragment-set.js';
import { REPLICA_WAIT_ROUND_MS_MAX } from '../core/limits.js';
import { Durability, isWriteRefusal, type Priority, Reply } from '../core/ops.js';
import { WaitRound } from '../core/replica-acks.js';
import type { AckLevel } from '../core/replication-sender.js';
import {
  type ReplicaWaitParams,
  ResultKind,
  resultDetail,
  resultReplicasReached,
  resultStatus,
} from '../threads/op-codec.js';
import type { ResultHandler } from './worker-link.js';

export interface ReplicaWaitRequest {
  /** The fragments written (each asked once, whatever order). */
  fragments: readonly number[];
  /** Other replicas each must reach. */
  replicas: number;
  level: AckLevel;
  /** The level the serving replica itself must reach first (WAITAOF's numlocal: Stable). */
  durability: Durability;
  priority: Priority;
  /** 0: no deadline. */
  timeoutMs: number;
  /** The answer when no fragment was written. */
  idleReached: number;
  /**
   * Fragments also written whose writes no replica can confirm any more (the replica that took
   * them no longer serves them): each counts as nothing reached.
   */
  unconfirmable?: number;
}

export interface ReplicaWaitAnswer {
  /** The fewest other replicas any fragment reached. */
  reached: number;
  /** Whether every fragment reached `durability` at its serving replica. */
  local: boolean;
}

/** What submits the asks: the dispatcher. */
export interface ReplicaWaitSubmitter {
  readonly turnClock: { nowMs(): number };
  submitReplicaWait<T>(
    fragment: number,
    params: { replicas: number; level: AckLevel; timeoutMs: number },
    durability: Durability,
    priority: Priority,
    handler: ResultHandler<T>,
    token: T,
  ): TesseraError | undefined;
}

/** One fragment's ask in a wait, and when it left. */
interface Ask {
  wait: Waiting;
  fragment: number;
  askedAtMs: number;
  askMs: number;
}

interface Waiting {
  submitter: ReplicaWaitSubmitter;
  request: ReplicaWaitRequest;
  round: WaitRound;
  resolve: (answer: ReplicaWaitAnswer) => void;
}

/**
 * The fragments a connection wrote (`written`, tracked since serving stamp `sinceStamp`), split for a
 * WAIT: those whose serving replica changed since (a failover, a move) took some of those writes
 * elsewhere, and the replica serving them now cannot confirm them.
 */
export function splitWritten(
  written: readonly number[],
  sinceStamp: number,
  servingChangedAt: (fragment: number) => number,
): { fragments: number[]; unconfirmable: number[] } {
  const fragments: number[] = [];
  const unconfirmable: number[] = [];
  for (const fragment of written)
    (servingChangedAt(fragment) > sinceStamp ? unconfirmable : fragments).push(fragment);
  return { fragments, unconfirmable };
}

/**
 * What a connection tracks once a WAIT that started at serving stamp `startStamp` answered: nothing,
 * when it confirmed every replica (nothing older can then ask for more); else all but the
 * unconfirmable fragments (they count as nothing reached once, as Redis's WAIT after a failover
 * answers only for writes the new master took), tracked since the WAIT's start — none had moved by
 * then — so a later write to a fragment that moved before the WAIT is asked about, not held
 * unconfirmable for as long as the connection writes. Returns the stamp to track since.
 */
export function forgetAfterWait(
  written: FragmentSet,
  unconfirmable: readonly number[],
  confirmedAll: boolean,
  startStamp: number,
): number {
  if (confirmedAll) written.clear();
  else for (const fragment of unconfirmable) written.delete(fragment);
  return startStamp;
}

/** Waits for the request's replicas on each of its fragments; never rejects. */
export function waitForReplicas(
  submitter: ReplicaWaitSubmitter,
  request: ReplicaWaitRequest,
): Promise<ReplicaWaitAnswer> {
  return new Promise((resolve) => {
    const nowMs = submitter.turnClock.nowMs();
    const deadlineMs = request.timeoutMs === 0 ? Number.POSITIVE_INFINITY : nowMs + request.timeoutMs;
    const unconfirmable = request.unconfirmable ?? 0;
    const fragments = request.fragments.length + unconfirmable;
    const round = new WaitRound(fragments, request.replicas, deadlineMs, request.idleReached);
    const wait: Waiting = { submitter, request, round, resolve };
    for (let i = 0; i < unconfirmable; i++) round.fail();
    for (const fragment of request.fragments) ask(wait, fragment);
    settleIfDone(wait);
  });
}

function ask(wait: Waiting, fragment: number): void {
  const { submitter, request, round } = wait;
  const nowMs = submitter.turnClock.nowMs();
  const askMs = round.askMs(nowMs, REPLICA_WAIT_ROUND_MS_MAX);
  const token: Ask = { wait, fragment, askedAtMs: nowMs, askMs };
  const params = { replicas: request.replicas, level: request.level, timeoutMs: askMs };
  const error = submitter.submitReplicaWait(
    fragment,
    params,
    request.durability,
    request.priority,
    askHandler,
    token,
  );
  if (error !== undefined) round.fail();
}

function settleIfDone(wait: Waiting): void {
  if (wait.round.done) wait.resolve({ reached: wait.round.reached, local: wait.round.localReached });
}

const askHandler: ResultHandler<Ask> = {
  onResult(token, buf, at) {
    const { wait } = token;
    const nowMs = wait.submitter.turnClock.nowMs();
    const local = resultStatus(buf, at) === Reply.FenceReached;
    const reached = local ? resultDetail(buf, at) : 0;
    // An answer before the ask's time is up, short of the goal, is all the serving node can give
    // (the fragment has fewer replicas there, or too many waits): asking again would only spin.
    const waitedFull = nowMs >= token.askedAtMs + token.askMs;
    if (wait.round.answer(reached, local, waitedFull ? nowMs : Number.POSITIVE_INFINITY))
      ask(wait, token.fragment);
    else settleIfDone(wait);
  },
  onFailure(token) {
    token.wait.round.fail();
    settleIfDone(token.wait);
  },
};

/** What a write asks of its replicas. */
export interface GatedWriteRequest {
  replicas: number;
  level: AckLevel;
  priority: Priority;
  /** How long it waits for them in all (≥ 1 ms). */
  timeoutMs: number;
}

/**
 * A write that waits for its replicas: sent with `params`, it is answered by its serving replica
 * once they acknowledged it or the ask's time is up. Its own refusal or failure stands; short of its
 * replicas it fails with NOREPLICAS (the write applied, not yet replicated), unless the serving
 * replica waited its whole ask and time is left: then fences ask on, as WAIT's do.
 */
export class GatedWrite<T> {
  /** The fragment written: set once the write is sent. */
  fragment = -1;
  /** The replica-wait parameters the write carries. */
  readonly params: ReplicaWaitParams;
  private readonly round: WaitRound;
  private readonly askEndsAtMs: number;

  constructor(
    private readonly submitter: ReplicaWaitSubmitter,
    private readonly handler: ResultHandler<T>,
    private readonly token: T,
    private readonly request: GatedWriteRequest,
  ) {
    const nowMs = submitter.turnClock.nowMs();
    this.round = new WaitRound(1, request.replicas, nowMs + request.timeoutMs, 0);
    const askMs = this.round.askMs(nowMs, REPLICA_WAIT_ROUND_MS_MAX);
    this.askEndsAtMs = nowMs + askMs;
    this.params = { replicas: request.replicas, level: request.level, timeoutMs: askMs };
  }

  /** The write's result, with the replicas it reached. */
  written(buf: Buffer, at: number, length: number): void {
    const status = resultStatus(buf, at);
    if (status === ResultKind.Error || isWriteRefusal(status))
      return this.handler.onResult(this.token, buf, at, length);
    const nowMs = this.submitter.turnClock.nowMs();
    const waitedFull = nowMs >= this.askEndsAtMs;
    const reached = resultReplicasReached(buf, at);
    if (!this.round.answer(reached, true, waitedFull ? nowMs : Number.POSITIVE_INFINITY))
      return this.settle(buf, at, length, reached);
    const result = Buffer.from(buf.subarray(at, at + length));
    waitForReplicas(this.submitter, {
      fragments: [this.fragment],
      replicas: this.request.replicas,
      level: this.request.level,
      durability: Durability.Memory,
      priority: this.request.priority,
      timeoutMs: Math.max(1, this.round.deadlineMs - nowMs),
      idleReached: 0,
    }).then((answer) => this.settle(result, 0, result.length, answer.reached));
  }

  failed(error: TesseraError): void {
    this.handler.onFailure(this.token, error);
  }

  private settle(buf: Buffer, at: number, length: number, reached: number): void {
    const { replicas, timeoutMs } = this.request;
    if (reached < replicas)
      return this.handler.onFailure(this.token, replicaTimeout(reached, replicas, timeoutMs));
    this.handler.onResult(this.token, buf, at, length);
  }
}

export const gatedWriteHandler: ResultHandler<GatedWrite<unknown>> = {
  onResult: (gate, buf, at, length) => gate.written(buf, at, length),
  onFailure: (gate, error) => gate.failed(error),
};
