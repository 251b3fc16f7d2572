// The worker's requests to the background pool (the main thread runs them in piscina): reading a
// span of a fragment from a read-only lmdb view, for anti-entropy and the TTL sweep, so this
// thread's actors are not held up by long reads. Each request is a task id answered by one
// PoolSpanResult.

import type { PageAnswer, RangeDigest } from '../core/reconciler.js';
import { pageAnswerOf, readPoolSpanResult, type SpanWork } from '../threads/op-codec.js';
import type { Span, SpanQuery } from './reconcile-span.js';
import type { ResultWriter } from './result-writer.js';

type PoolResult = NonNullable<ReturnType<typeof readPoolSpanResult>>;

export class PoolSpans {
  private nextTask = 1;
  private readonly tasks = new Map<number, { resolve(span: PoolResult): void; reject(err: Error): void }>();

  constructor(private readonly results: ResultWriter) {}

  /**
   * Reads the TTL cleaner's page of `fragment` after `afterKey` that `q` asks for: the entries
   * expired at `expiredAtMs` (src/workers/expired-span.ts).
   */
  read(fragment: number, afterKey: Uint8Array | undefined, q: SpanQuery, expiredAtMs: number): Promise<Span> {
    return this.run(fragment, afterKey, q, { expiredAtMs });
  }

  /** A requester's page of `fragment` (the span `q` asks for) as range digests (reconciler.ts `describePage`). */
  async describe(
    fragment: number,
    afterKey: Uint8Array | undefined,
    q: SpanQuery,
    horizonMs: number,
  ): Promise<{ ranges: RangeDigest[]; openEnd: boolean }> {
    const result = await this.run(fragment, afterKey, q, { work: { kind: 'describe', horizonMs } });
    const ranges = result.entries.map((e) => ({ lastKey: e.key, digest: e.record }));
    return { ranges, openEnd: !result.truncated };
  }

  /** A responder's answer to a page (reconciler.ts `answerPage`) over the span `q` asks for. */
  async answer(
    fragment: number,
    afterKey: Uint8Array | undefined,
    q: SpanQuery,
    work: SpanWork & { kind: 'answer' },
  ): Promise<PageAnswer> {
    const answer = pageAnswerOf(await this.run(fragment, afterKey, q, { work }));
    if (answer === undefined) throw new Error('background pool answered without an answer');
    return answer;
  }

  private run(
    fragment: number,
    afterKey: Uint8Array | undefined,
    q: SpanQuery,
    extra: { expiredAtMs?: number; work?: SpanWork },
  ): Promise<PoolResult> {
    const taskId = this.nextTask++;
    this.results.poolSpanRequest(taskId, { fragment, afterKey, ...q, ...extra });
    return new Promise<PoolResult>((resolve, reject) => this.tasks.set(taskId, { resolve, reject }));
  }

  /** The pool's answer (a PoolSpanResult record) to task `taskId`. */
  onResult(taskId: number, buf: Buffer, at: number, length: number): void {
    const task = this.tasks.get(taskId);
    if (task === undefined) return;
    this.tasks.delete(taskId);
    const span = readPoolSpanResult(buf, at, at + length);
    if (span === undefined) task.reject(new Error('background pool could not read the span'));
    else task.resolve(span);
  }
}
