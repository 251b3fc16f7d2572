// The main thread's end of one worker: its two rings, the table of requests in flight, and the
// worker's supervision. A worker that dies is restarted with backoff on fresh rings; the requests it
// held fail with a clear error instead of hanging; requests sent meanwhile wait in the new ring.

import { Worker } from 'node:worker_threads';
import type { Logger } from 'pino';
import { copyBytes, readU32LE, writeU32LE } from '../core/bytes.js';
import { backpressure, internalError, shuttingDown, type TesseraError } from '../core/errors.js';
import {
  REQUEST_PUBLISH_RECORDS,
  RING_OVERFLOW_RECORDS_MAX,
  WORKER_RESTART_ATTEMPTS_MAX,
  WORKER_RESTART_BACKOFF_MS_MAX,
  WORKER_RESTART_BACKOFF_MS_MIN,
  WORKER_START_TIMEOUT_MS,
  WORKER_YOUNG_GENERATION_MB,
} from '../core/limits.js';
import {
  isWorkerEvent,
  isWorkerPortEvent,
  type WorkerInit,
  type WorkerPortCommand,
  type WorkerPortEvent,
} from '../threads/messages.js';
import {
  acksCount,
  acksReply,
  CONTROL_HEADER_BYTES,
  PEER_HEADER_BYTES,
  PeerStateFlag,
  peerOf,
  poolSpanResultBytes,
  RESULT_HEADER_BYTES,
  RequestKind,
  ResultKind,
  resultDetail,
  resultId,
  resultStatus,
  writeControlHeader,
  writePeerHeader,
  writePoolSpanResult,
  writeResultHeader,
} from '../threads/op-codec.js';
import { createRing, type DrainLoop, drainLoop, RingReader, RingWriter } from '../threads/ring.js';
import { RingOutbox } from '../threads/ring-outbox.js';

/** Receives the result of a request; `token` is whatever the sender passed along. */
export interface ResultHandler<T> {
  /** `buf[at, at + length)` is ring memory, valid only during the call: copy what you keep. */
  onResult(token: T, buf: Buffer, at: number, length: number): void;
  onFailure(token: T, error: TesseraError): void;
}

export type LinkState = 'starting' | 'ready' | 'restarting' | 'failed' | 'closing' | 'closed';

export interface LinkDeps {
  ringBytes: number;
  /** The worker's old-generation limit in MiB; undefined: V8's default. */
  oldGenerationMb?: number;
  entry: URL;
  makeInit(
    index: number,
    requestRing: SharedArrayBuffer,
    resultRing: SharedArrayBuffer,
    restarted: boolean,
  ): WorkerInit;
  /**
   * Called with the worker's newest stored timestamp and the fragments it found a copy of on disk;
   * returns an error to refuse the start.
   */
  onReady(index: number, highWaterWallMs: number, stored: readonly number[]): TesseraError | undefined;
  /** A frame the worker wrote for peer `member`: `buf[start, end)` is ring memory, valid during the call. */
  onPeerFrame?(member: number, buf: Buffer, start: number, end: number): void;
  /** The worker found peer `member` breaking the protocol. */
  onPeerClose?(member: number, reason: string): void;
  /** The worker (re)started and serves its rings. */
  onServing?(index: number): void;
  /** The worker asks for an anti-entropy span from the background pool (ResultKind.PoolSpan). */
  onPoolSpan?(index: number, buf: Buffer, at: number, length: number): void;
  /**
   * An anti-entropy round of one of the worker's senders ended (ResultKind.RoundReport), or pulled a
   * page (ResultKind.RoundProgress); ring memory.
   */
  onRoundReport?(buf: Buffer, at: number, length: number): void;
  /** A control message about the worker's RESP port (src/workers/resp-port.ts). */
  onPortEvent?(index: number, event: WorkerPortEvent): void;
  logger: Logger;
}

export class WorkerLink {
  state: LinkState = 'starting';
  restarts = 0;
  /** Request buffer: encode the payload here at the offset `begin` returned. */
  buffer!: Buffer;
  /** Request id of the request being encoded. */
  reqId = 0;

  private worker: Worker | undefined;
  /** The start of a thread, until it is ready or has failed. */
  private spawning: Promise<void> | undefined;
  private outbox!: RingOutbox;
  private reader!: RingReader;
  private drain: DrainLoop | undefined;
  private requestRing!: SharedArrayBuffer;
  private resultRing!: SharedArrayBuffer;
  private readonly handlers: (ResultHandler<unknown> | undefined)[] = [];
  /** The result header an Acks reply is handed over as (valid during the handler's call). */
  private readonly ackHeader = Buffer.alloc(RESULT_HEADER_BYTES);
  private readonly tokens: unknown[] = [];
  private readonly freeSlots: number[] = [];
  private inFlight = 0;
  private publishScheduled = false;
  private readonly publishTask = (): void => {
    this.publishScheduled = false;
    this.outbox.publish();
  };
  private failures = 0;
  private failure: TesseraError | undefined;
  private idleWaiters: Array<() => void> = [];

  constructor(
    readonly index: number,
    private readonly deps: LinkDeps,
  ) {
    this.newRings();
  }

  get pending(): number {
    return this.inFlight;
  }

  /** Starts the worker; resolves when its stores are open. */
  start(): Promise<void> {
    return this.spawn();
  }

  /** False when the worker is gone for good, or too many requests already wait for ring space. */
  canAccept(): boolean {
    return (
      (this.state === 'ready' || this.state === 'starting' || this.state === 'restarting') &&
      this.outbox.overflowRecords < RING_OVERFLOW_RECORDS_MAX
    );
  }

  /** Why `canAccept` is false. */
  refusal(): TesseraError {
    if (this.state === 'failed') return this.failure ?? internalError(`worker ${this.index} failed`);
    if (this.state === 'closing' || this.state === 'closed') return shuttingDown();
    return backpressure(
      `worker ${this.index} is not keeping up: ${RING_OVERFLOW_RECORDS_MAX} requests wait for its ring`,
    );
  }

  /**
   * Registers a request of `bytes` and reserves ring space for it; the caller encodes it into
   * `this.buffer` at the returned offset using `this.reqId`, then calls `end()`.
   */
  begin<T>(handler: ResultHandler<T>, token: T, bytes: number): number {
    const slot = this.freeSlots.length > 0 ? this.freeSlots.pop()! : this.handlers.length;
    this.handlers[slot] = handler as ResultHandler<unknown>;
    this.tokens[slot] = token;
    this.inFlight++;
    this.reqId = slot;
    const at = this.outbox.reserve(bytes);
    this.buffer = this.outbox.buffer;
    return at;
  }

  /** Hands the worker a peer frame (envelope bytes) for one of its fragments. */
  sendPeerFrame(member: number, envelope: Uint8Array): void {
    const at = this.outbox.reserve(PEER_HEADER_BYTES + envelope.length);
    this.buffer = this.outbox.buffer;
    copyBytes(this.buffer, writePeerHeader(this.buffer, at, RequestKind.PeerFrame, 0, member), envelope);
    this.end();
  }

  /** Answers a PoolSpan with the record the pool wrote (op-codec.ts `encodePoolSpanResult`). */
  sendPoolSpanRecord(record: Uint8Array): void {
    const at = this.outbox.reserve(record.length);
    this.buffer = this.outbox.buffer;
    copyBytes(this.buffer, at, record);
    this.end();
  }

  /** Answers a PoolSpan the pool could not run. */
  sendPoolSpanFailed(taskId: number): void {
    const at = this.outbox.reserve(poolSpanResultBytes(undefined));
    this.buffer = this.outbox.buffer;
    writePoolSpanResult(this.buffer, at, taskId, undefined);
    this.end();
  }

  /** Tells the worker a peer connection came up (and whether the peer takes FragmentAbsent) or went down. */
  sendPeerState(member: number, up: boolean, takesFragmentAbsent: boolean): void {
    const at = this.outbox.reserve(PEER_HEADER_BYTES);
    this.buffer = this.outbox.buffer;
    const flags =
      (up ? PeerStateFlag.Up : 0) | (up && takesFragmentAbsent ? PeerStateFlag.TakesFragmentAbsent : 0);
    writePeerHeader(this.buffer, at, RequestKind.PeerState, flags, member);
    this.end();
  }

  /**
   * Finishes the request `begin` started. The worker sees it at the end of this event-loop turn,
   * with every other request the turn's I/O brought (or sooner, in a burst: REQUEST_PUBLISH_RECORDS):
   * one wake-up of a sleeping worker per turn rather than one per client connection.
   */
  end(): void {
    this.outbox.commit();
    if (!this.publishScheduled) {
      this.publishScheduled = true;
      setImmediate(this.publishTask);
    }
  }

  /** Sends the worker a control message about its RESP port; false when no worker runs. */
  post(command: WorkerPortCommand): boolean {
    if (this.worker === undefined || this.state !== 'ready') return false;
    this.worker.postMessage(command);
    return true;
  }

  /** Resolves once no request is in flight. */
  whenIdle(): Promise<void> {
    if (this.inFlight === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  /** Test hook: makes the worker throw an uncaught error, as a crash would. */
  crash(): void {
    const at = this.begin(ignoreResult, undefined, CONTROL_HEADER_BYTES);
    writeControlHeader(this.buffer, at, RequestKind.Crash, this.reqId);
    this.end();
  }

  /** Test hook: the worker's next `count` store commits fail with a storage error. */
  failCommits(count: number): void {
    const at = this.begin(ignoreResult, undefined, CONTROL_HEADER_BYTES + 4);
    writeU32LE(this.buffer, writeControlHeader(this.buffer, at, RequestKind.FailCommits, this.reqId), count);
    this.end();
  }

  /** Asks the worker to close its store, then ends the thread. */
  async close(): Promise<void> {
    // A thread still starting is let finish (or fail) first: ending one while it loads lmdb's native
    // addon is a fatal error of the whole process.
    while (this.spawning !== undefined) await this.spawning.catch(ignoreError);
    if (this.state === 'closed' || this.state === 'failed') return this.stopThread();
    if (this.state === 'restarting') {
      // No worker runs (its restart is pending): there is nothing to ask, and nothing will answer.
      this.state = 'closing';
      this.failHeld(shuttingDown());
      return this.stopThread();
    }
    this.state = 'closing';
    const closed = new Promise<TesseraError | undefined>((resolve) => {
      const at = this.begin(closeHandler, resolve, CONTROL_HEADER_BYTES);
      writeControlHeader(this.buffer, at, RequestKind.Close, this.reqId);
      this.end();
    });
    const error = await closed;
    await this.stopThread();
    if (error !== undefined) throw error;
  }

  private async stopThread(): Promise<void> {
    this.state = 'closed';
    this.drain?.stop();
    this.drain = undefined;
    const worker = this.worker;
    this.worker = undefined;
    if (worker !== undefined) await worker.terminate();
  }

  private newRings(): void {
    this.requestRing = createRing(this.deps.ringBytes);
    this.resultRing = createRing(this.deps.ringBytes);
    this.outbox = new RingOutbox(new RingWriter(this.requestRing), REQUEST_PUBLISH_RECORDS);
    this.buffer = this.outbox.buffer;
    this.reader = new RingReader(this.resultRing);
  }

  private spawn(): Promise<void> {
    const spawning = this.spawnThread();
    this.spawning = spawning;
    const settled = () => {
      if (this.spawning === spawning) this.spawning = undefined;
    };
    spawning.then(settled, settled);
    return spawning;
  }

  private spawnThread(): Promise<void> {
    const init = this.deps.makeInit(
      this.index,
      this.requestRing,
      this.resultRing,
      this.state === 'restarting',
    );
    const worker = new Worker(this.deps.entry, {
      workerData: init,
      resourceLimits: {
        maxYoungGenerationSizeMb: WORKER_YOUNG_GENERATION_MB,
        maxOldGenerationSizeMb: this.deps.oldGenerationMb,
      },
    });
    this.worker = worker;
    return new Promise<void>((resolve, reject) => {
      let settled = false;
      const timer = setTimeout(() => {
        settle(
          internalError(`worker ${this.index} did not open its stores within ${WORKER_START_TIMEOUT_MS} ms`),
        );
        void worker.terminate();
      }, WORKER_START_TIMEOUT_MS);
      const settle = (error: TesseraError | undefined) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        if (error === undefined) resolve();
        else reject(error);
      };
      worker.on('message', (message: unknown) => {
        if (isWorkerPortEvent(message)) return this.deps.onPortEvent?.(this.index, message);
        if (!isWorkerEvent(message)) return;
        if (message.kind === 'ready') {
          const refusal = this.deps.onReady(this.index, message.highWaterWallMs, message.stored);
          if (refusal !== undefined) {
            settle(refusal);
            void worker.terminate();
            return;
          }
          this.state = 'ready';
          this.failures = 0;
          this.drain = drainLoop(this.reader, () => this.onResults());
          settle(undefined);
          this.deps.onServing?.(this.index);
        } else if (message.kind === 'fatal') {
          settle(internalError(`worker ${this.index} could not start: ${message.message}`));
          void worker.terminate();
        }
      });
      worker.on('error', (err) => {
        this.deps.logger.error({ worker: this.index, err: err.message }, 'worker error');
      });
      worker.on('exit', (code) => {
        if (this.worker !== worker) return;
        settle(internalError(`worker ${this.index} exited with code ${code} before it was ready`));
        this.onExit(code);
      });
    });
  }

  private onResults(): void {
    const reader = this.reader;
    const buf = reader.bytes;
    let at: number;
    while ((at = reader.next()) !== -1) {
      const status = resultStatus(buf, at);
      if (status === ResultKind.PeerFrame) {
        this.deps.onPeerFrame?.(peerOf(buf, at), buf, at + PEER_HEADER_BYTES, at + reader.recordBytes);
        continue;
      }
      if (status === ResultKind.PoolSpan) {
        this.deps.onPoolSpan?.(this.index, buf, at, reader.recordBytes);
        continue;
      }
      if (status === ResultKind.PeerClose) {
        const reason = buf.toString('utf8', at + PEER_HEADER_BYTES, at + reader.recordBytes);
        this.deps.onPeerClose?.(peerOf(buf, at), reason);
        continue;
      }
      if (status === ResultKind.Acks) {
        this.onAcks(buf, at);
        continue;
      }
      if (status === ResultKind.RoundReport || status === ResultKind.RoundProgress) {
        this.deps.onRoundReport?.(buf, at, reader.recordBytes);
        continue;
      }
      const slot = resultId(buf, at);
      const handler = this.handlers[slot];
      const token = this.tokens[slot];
      this.freeSlot(slot);
      handler?.onResult(token, buf, at, reader.recordBytes);
    }
    reader.release();
    if (this.inFlight === 0 && this.idleWaiters.length > 0) this.wakeIdle();
  }

  /** Hands each reply of an Acks record to its handler as the header-only result it stands for. */
  private onAcks(buf: Buffer, at: number): void {
    const header = this.ackHeader;
    writeResultHeader(header, 0, acksReply(buf, at), resultDetail(buf, at), 0);
    const count = acksCount(buf, at);
    for (let i = 0, p = at + RESULT_HEADER_BYTES; i < count; i++, p += 4) {
      const slot = readU32LE(buf, p);
      writeU32LE(header, 4, slot);
      const handler = this.handlers[slot];
      const token = this.tokens[slot];
      this.freeSlot(slot);
      handler?.onResult(token, header, 0, RESULT_HEADER_BYTES);
    }
  }

  private freeSlot(slot: number): void {
    this.handlers[slot] = undefined;
    this.tokens[slot] = undefined;
    this.freeSlots.push(slot);
    this.inFlight--;
  }

  private wakeIdle(): void {
    const waiters = this.idleWaiters;
    this.idleWaiters = [];
    for (const wake of waiters) wake();
  }

  /**
   * An unexpected exit: fail what the worker held (it may have consumed any of it), switch to fresh
   * rings, and restart with backoff. A failed restart attempt lands here too; its spawn promise
   * schedules the next attempt.
   */
  private onExit(code: number): void {
    // What the worker published before it exited is in the ring, and the exit may be seen before
    // the wake-up for it: deliver it first. (A worker ends on its own once it has answered Close.)
    if (this.drain !== undefined) this.onResults();
    this.drain?.stop();
    this.drain = undefined;
    this.worker = undefined;
    if (this.state === 'closed' || this.state === 'failed') return;
    if (this.state === 'closing') {
      // Nothing more will come: whatever is still held — the Close itself, if unanswered — fails.
      this.failHeld(internalError(`worker ${this.index} exited (code ${code}) while closing`));
      return;
    }
    const wasReady = this.state === 'ready';
    if (wasReady) this.state = 'restarting';
    this.failHeld(
      internalError(
        `worker ${this.index} stopped unexpectedly (exit code ${code}); the operation may or may not have been applied`,
      ),
      () => this.newRings(),
    );
    if (wasReady) {
      this.deps.logger.error(
        { worker: this.index, code, restarts: this.restarts },
        'worker exited; restarting',
      );
      this.scheduleRestart();
    }
  }

  /** Fails every request still held; `beforeFailing` runs once they are taken (handlers may submit). */
  private failHeld(error: TesseraError, beforeFailing?: () => void): void {
    const held: Array<[ResultHandler<unknown>, unknown]> = [];
    for (let slot = 0; slot < this.handlers.length; slot++) {
      const handler = this.handlers[slot];
      if (handler === undefined) continue;
      held.push([handler, this.tokens[slot]]);
      this.freeSlot(slot);
    }
    beforeFailing?.();
    for (const [handler, token] of held) handler.onFailure(token, error);
    this.wakeIdle();
  }

  private scheduleRestart(): void {
    const backoffMs = Math.min(
      WORKER_RESTART_BACKOFF_MS_MAX,
      WORKER_RESTART_BACKOFF_MS_MIN * 2 ** this.failures,
    );
    setTimeout(() => {
      if (this.state !== 'restarting') return;
      this.spawn().then(
        () => {
          this.restarts++;
          this.deps.logger.info({ worker: this.index, restarts: this.restarts }, 'worker restarted');
        },
        (err: TesseraError) => {
          this.failures++;
          this.deps.logger.error(
            { worker: this.index, err: err.message, failures: this.failures },
            'restart failed',
          );
          if (this.failures >= WORKER_RESTART_ATTEMPTS_MAX) this.giveUp(err);
          else if (this.state === 'restarting') this.scheduleRestart();
        },
      );
    }, backoffMs);
  }

  private giveUp(err: TesseraError): void {
    this.state = 'failed';
    this.failure = internalError(
      `worker ${this.index} failed to restart ${this.failures} times: ${err.message}`,
    );
    for (let slot = 0; slot < this.handlers.length; slot++) {
      const handler = this.handlers[slot];
      if (handler === undefined) continue;
      const token = this.tokens[slot];
      this.freeSlot(slot);
      handler.onFailure(token, this.failure);
    }
    this.wakeIdle();
  }
}

const ignoreResult: ResultHandler<undefined> = {
  onResult() {},
  onFailure() {},
};

const closeHandler: ResultHandler<(error: TesseraError | undefined) => void> = {
  onResult(resolve, buf, at, length) {
    if (resultStatus(buf, at) === ResultKind.Closed) resolve(undefined);
    else resolve(internalError(buf.toString('utf8', at + RESULT_HEADER_BYTES, at + length)));
  },
  onFailure(resolve, error) {
    resolve(error);
  },
};

function ignoreError(): void {}
