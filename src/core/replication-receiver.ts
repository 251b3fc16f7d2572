// The receiving side of one peer's replication session for one fragment (spec §5.3), as a pure
// state machine: which batches to apply, and the order of the answers. The sender keeps a window
// of batches in flight and reads an ACK of batch k as "every batch through k reached the level"
// (replication-sender.ts), so the receiver must keep to that:
// - Batches are applied in seq order, from 1: a duplicate (a seq already taken) is ignored; a gap
//   (a batch lost) is refused, since what follows cannot be acknowledged.
// - Answers go in seq order, each once the batch's fence is reached: a batch whose fence comes
//   first waits for those before it.
// - After a refusal nothing more of the session is applied or answered: the sender replays from its
//   oldest unacknowledged batch in a new session.
// - A session holds at most `windowBatches` batches unanswered; a sender past that is refused.
// The driver (src/workers/replication.ts) checks that the session is the one the peer started, and
// carries out the applies and the answers.

import { assert } from './assert.js';
import type { AckLevel } from './replication-sender.js';

export type BatchVerdict =
  | { kind: 'apply' }
  | { kind: 'ignore' }
  /** Answer the batch with a NACK at once: the session ends here. */
  | { kind: 'refuse'; error: string };

/** An answer to send: an ACK at `level`, or a NACK when `error` is not empty. */
export interface BatchAnswer {
  sessionId: number;
  batchSeq: number;
  level: AckLevel;
  error: string;
}

const APPLY: BatchVerdict = { kind: 'apply' };
const IGNORE: BatchVerdict = { kind: 'ignore' };

export class BatchReceiver {
  private sessionId = 0;
  /** The last seq applied; batches after `answeredSeq` await their answer. */
  private appliedSeq = 0;
  private answeredSeq = 0;
  private failed = false;
  /** Per batch awaiting its answer, oldest first: its level, and its outcome once known. */
  private readonly levels: AckLevel[] = [];
  private readonly outcomes: (string | undefined)[] = [];
  private readonly outbox: BatchAnswer[] = [];

  constructor(private readonly windowBatches: number) {
    assert(Number.isInteger(windowBatches) && windowBatches >= 1, 'windowBatches must be ≥ 1');
  }

  /** Batch `batchSeq` of `sessionId` (the peer's current session) arrived, asking for `level`. */
  admit(sessionId: number, batchSeq: number, level: AckLevel): BatchVerdict {
    if (sessionId !== this.sessionId) this.startSession(sessionId);
    if (this.failed || batchSeq <= this.appliedSeq) return IGNORE;
    if (batchSeq !== this.appliedSeq + 1)
      return this.refuse(`batch ${batchSeq} out of order: ${this.appliedSeq + 1} expected`);
    if (this.appliedSeq - this.answeredSeq >= this.windowBatches)
      return this.refuse(`more than ${this.windowBatches} batches unanswered`);
    this.appliedSeq = batchSeq;
    this.levels.push(level);
    this.outcomes.push(undefined);
    return APPLY;
  }

  /**
   * The batch applied as `batchSeq` of `sessionId` is done: its fence reached, or `error`. Its
   * answer goes out after those of the batches before it; a stale session's is dropped.
   */
  finished(sessionId: number, batchSeq: number, error: string): void {
    if (sessionId !== this.sessionId || batchSeq <= this.answeredSeq || batchSeq > this.appliedSeq) return;
    const index = batchSeq - this.answeredSeq - 1;
    assert(this.outcomes[index] === undefined, 'a batch finishes once');
    this.outcomes[index] = error;
    if (error !== '') this.failed = true;
    let answered = 0;
    while (answered < this.outcomes.length && this.outcomes[answered] !== undefined) {
      const outcome = this.outcomes[answered]!;
      this.answeredSeq++;
      this.outbox.push({
        sessionId,
        batchSeq: this.answeredSeq,
        level: this.levels[answered]!,
        error: outcome,
      });
      answered++;
      if (outcome !== '') {
        // Nothing after a refusal is answered: the sender replays it all in a new session.
        answered = this.outcomes.length;
        this.answeredSeq = this.appliedSeq;
      }
    }
    this.levels.splice(0, answered);
    this.outcomes.splice(0, answered);
  }

  /** Moves the answers produced so far into `into`, leaving the outbox empty. */
  takeAnswers(into: BatchAnswer[]): void {
    for (const answer of this.outbox) into.push(answer);
    this.outbox.length = 0;
  }

  /** Canonical one-line state for tests. */
  describe(): string {
    const pending = this.outcomes.map((o) => (o === undefined ? '…' : o === '' ? 'ok' : 'failed'));
    return `session=${this.sessionId} applied=${this.appliedSeq} answered=${this.answeredSeq} [${pending.join(' ')}]${this.failed ? ' failed' : ''}`;
  }

  private startSession(sessionId: number): void {
    this.sessionId = sessionId;
    this.appliedSeq = 0;
    this.answeredSeq = 0;
    this.failed = false;
    this.levels.length = 0;
    this.outcomes.length = 0;
  }

  private refuse(error: string): BatchVerdict {
    this.failed = true;
    return { kind: 'refuse', error };
  }
}
