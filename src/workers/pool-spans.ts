// The worker's requests to the background pool (the main thread runs them in piscina): reading a
// span of a fragment from a read-only lmdb view, for anti-entropy and the TTL sweep, so this
// thread's actors are not held up by long reads. Each request is a task id answered by one
// PoolSpanResult.

import { readPoolSpanResult } from '../threads/op-codec.js';
import type { Span, SpanQuery } from './reconcile-span.js';
import type { ResultWriter } from './result-writer.js';

export class PoolSpans {
  private nextTask = 1;
  private readonly tasks = new Map<number, { resolve(span: Span): void; reject(err: Error): void }>();

  constructor(private readonly results: ResultWriter) {}

  /**
   * Reads the span of `fragment` after `afterKey` that `q` asks for; with `expiredAtMs`, only the
   * entries expired at that time (src/workers/expired-span.ts).
   */
  read(
    fragment: number,
    afterKey: Uint8Array | undefined,
    q: SpanQuery,
    expiredAtMs?: number,
  ): Promise<Span> {
    const taskId = this.nextTask++;
    this.results.poolSpanRequest(taskId, { fragment, afterKey, ...q, expiredAtMs });
    return new Promise<Span>((resolve, reject) => this.tasks.set(taskId, { resolve, reject }));
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
