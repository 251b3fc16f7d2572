// SCAN across fragments: options, cursors, and where each page is read. A page of a fragment is
// read by its worker after a fence (so every write acknowledged before the scan is in the store),
// except pattern-filtered pages of an lmdb store, which can examine many keys per match: those run in
// the background pool (piscina) on a read-only view, so the fragment actor keeps serving meanwhile.
// The pool is bounded (a full queue answers Backpressure) and rate-limited like the Background queue.

import { Piscina } from 'piscina';
import { assert } from '../core/assert.js';
import { backpressure, ErrorKind, invalidInput, TesseraError } from '../core/errors.js';
import { literalPrefix } from '../core/glob.js';
import type { Keyspace } from '../core/keyspace.js';
import {
  ANTI_ENTROPY_POOL_TASKS_MAX,
  KEY_BYTES_MAX,
  POOL_CLOSE_TIMEOUT_MS,
  POOL_QUEUE_TASKS_MAX,
  POOL_THREAD_LOAD_POLL_MS,
  POOL_THREAD_LOAD_WAIT_MS_MAX,
  SCAN_EXAMINED_KEYS_MAX,
  SCAN_PAGE_BYTES_MAX,
  SCAN_PAGE_KEYS_DEFAULT,
  SCAN_PAGE_KEYS_MAX,
  SCAN_PATTERN_BYTES_MAX,
  SCAN_POOL_EXAMINED_MIN,
} from '../core/limits.js';
import { TokenBucket } from '../core/op-queue.js';
import { Durability, PRIORITY_NAMES, Priority, parsePriority, Reply } from '../core/ops.js';
import { expiresAtOf, valueBytesOf } from '../core/record.js';
import type { ScanTask, SpanTask } from '../threads/messages.js';
import { isPoolThreadLoaded } from '../threads/messages.js';
import {
  RESULT_HEADER_BYTES,
  ResultKind,
  readScanPage,
  resultStatus,
  type ScanPage,
  type ScanRequest,
} from '../threads/op-codec.js';
import type { NodeConfig } from './config.js';
import type { Dispatcher } from './dispatcher.js';
import { resultError } from './result-error.js';
import type { ResultHandler } from './worker-link.js';

export interface ScanOptions {
  /** Only keys starting with these bytes. */
  prefix?: string | Uint8Array;
  /** Only keys ≥ start (byte order). */
  start?: string | Uint8Array;
  /** Only keys < end (byte order). */
  end?: string | Uint8Array;
  /** Only keys matching this Redis-style glob (`*`, `?`, `[a-z]`, `\x`). */
  match?: string | Uint8Array;
  /** Where to continue: the `cursor` of the previous page. */
  cursor?: string;
  /** Most entries in this page (default 100, at most 10 000). */
  limit?: number;
  /** Return keys without values. */
  keysOnly?: boolean;
  /** Give each entry its deadline (`expiresAtMs`, 0 for none), with or without values. */
  expiry?: boolean;
  /**
   * Most keys this page examines (default 100 000): a pattern scan returns what it found so far, with
   * a cursor, once it has looked at this many — like Redis's SCAN COUNT.
   */
  examineLimit?: number;
  priority?: (typeof PRIORITY_NAMES)[number];
  /**
   * In a cluster, only the fragments this node serves — how Redis Cluster's per-node DBSIZE counts,
   * so the counts of all nodes add up to the cluster's keys. Default: every fragment, each read
   * where it is served.
   */
  servedHere?: boolean;
}

export interface ScanResult {
  /** `expiresAtMs` (0: none) when the scan asked for `expiry`. */
  entries: Array<{ key: Buffer; value: Buffer | undefined; expiresAtMs?: number }>;
  /** Pass to the next call; undefined when the iteration is complete. */
  cursor: string | undefined;
}

const CURSOR_VERSION = 1;
const CURSOR_HEADER_BYTES = 4;

export class Scanner {
  private pool: Piscina | undefined;
  /** Pool threads, by thread id, that have loaded their task module (`close`). */
  private readonly loadedPoolThreads = new Set<number>();
  private readonly poolTokens: TokenBucket;
  private poolWaiting = 0;
  private spansWaiting = 0;
  /** Anti-entropy pages the pool has read (INFO replication). */
  spansServed = 0;

  private readonly keyspace: Keyspace;

  constructor(
    private readonly config: NodeConfig,
    private readonly dispatcher: Dispatcher,
  ) {
    this.keyspace = dispatcher.keyspace;
    this.poolTokens = new TokenBucket(
      config.poolTasksPerSec,
      Math.max(1, Math.ceil(config.poolTasksPerSec / 10)),
      Date.now(),
    );
  }

  async scan(options: ScanOptions): Promise<ScanResult> {
    const plan = planScan(options);
    const entries: ScanResult['entries'] = [];
    let bytes = 0;
    let { fragment, resume } = plan.cursor;
    if (fragment >= this.keyspace.fragmentCount)
      throw invalidInput('scan cursor names a fragment this node does not have');
    const servedHere = options.servedHere === true;
    while (
      fragment < this.keyspace.fragmentCount &&
      entries.length < plan.limit &&
      bytes < SCAN_PAGE_BYTES_MAX
    ) {
      if (servedHere && !this.dispatcher.servesHere(fragment)) {
        fragment++;
        resume = undefined;
        continue;
      }
      const request: ScanRequest = {
        fragment,
        start: resume ?? plan.start,
        startInclusive: resume === undefined,
        end: plan.end,
        limit: plan.limit - entries.length,
        byteLimit: SCAN_PAGE_BYTES_MAX - bytes,
        examineLimit: plan.examineLimit,
        pattern: plan.pattern,
        // Keys with their deadlines: the records' stamps travel, not their values.
        keysOnly: plan.keysOnly && !plan.expiry,
        stampsOnly: plan.keysOnly && plan.expiry,
      };
      const page = await this.readPage(request, plan.priority);
      for (const e of page.entries) {
        const value =
          e.record === undefined || plan.keysOnly ? undefined : Buffer.from(valueBytesOf(e.record));
        if (plan.expiry) entries.push({ key: e.key, value, expiresAtMs: expiresAtOf(e.record!) });
        else entries.push({ key: e.key, value });
        bytes += e.key.length + (value?.length ?? 0);
      }
      if (page.done) {
        fragment++;
        resume = undefined;
      } else {
        resume = page.resumeKey;
        break;
      }
    }
    const cursor = fragment < this.keyspace.fragmentCount ? encodeCursor(fragment, resume) : undefined;
    return { entries, cursor };
  }

  /** One page of one fragment, read by the worker that owns it. */
  private workerPage(request: ScanRequest, priority: Priority): Promise<ScanPage> {
    return new Promise<ScanPage>((resolve, reject) => {
      const error = this.dispatcher.submitScan(request, priority, scanHandler, { resolve, reject });
      if (error !== undefined) reject(error);
    });
  }

  /**
   * Resolves once every write acknowledged to `fragment` is committed (visible to other readers);
   * rejects at once while its store keeps failing.
   */
  private fence(fragment: number): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const error = this.dispatcher.submitFence(
        fragment,
        Durability.Store,
        Priority.Default,
        fenceHandler,
        { resolve, reject },
        { forScan: true },
      );
      if (error !== undefined) reject(error);
    });
  }

  /**
   * Ends the pool. A thread ended while it is inside lmdb's native code — loading the addon, or in a
   * read — takes the whole process down (the addon's error cannot be thrown into a thread being
   * terminated: a fatal error), so threads first finish loading, then their running tasks.
   */
  async close(): Promise<void> {
    const pool = this.pool;
    this.pool = undefined;
    if (pool === undefined) return;
    const deadline = Date.now() + POOL_THREAD_LOAD_WAIT_MS_MAX;
    while (pool.threads.some((t) => !this.loadedPoolThreads.has(t.threadId)) && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, POOL_THREAD_LOAD_POLL_MS));
    }
    await pool.close();
  }

  private async readPage(request: ScanRequest, priority: Priority): Promise<ScanPage> {
    const large = request.examineLimit > SCAN_POOL_EXAMINED_MIN;
    const here = this.dispatcher.servesHere(request.fragment);
    if (request.pattern === undefined || this.config.store !== 'lmdb' || !large || !here) {
      return this.workerPage(request, priority);
    }
    try {
      await this.fence(request.fragment);
    } catch (err) {
      // The store is failing: the worker reads it with the writes it could not commit laid over it.
      if (err instanceof TesseraError && err.kind === ErrorKind.Storage)
        return this.workerPage(request, priority);
      throw err;
    }
    return this.poolPage(request);
  }

  /**
   * Reads an anti-entropy span in the background pool (lmdb only), under the pool's bounds and
   * rate; rejects with Backpressure when it is full. `request` is a worker's PoolSpan record, in
   * an ArrayBuffer of its own that moves to the pool; the answer is the PoolSpanResult record
   * for the worker.
   */
  async poolSpan(request: Uint8Array): Promise<Uint8Array> {
    // Not rate-limited like scans: rounds pace themselves, a page at a time.
    if (this.spansWaiting >= ANTI_ENTROPY_POOL_TASKS_MAX) {
      throw backpressure(`background pool holds ${ANTI_ENTROPY_POOL_TASKS_MAX} anti-entropy pages`);
    }
    this.spansWaiting++;
    try {
      const span: SpanTask = {
        kind: 'span',
        dataDir: this.config.dataDir,
        fragmentCount: this.config.fragments,
        groupCount: this.dispatcher.groupCount,
        request,
      };
      const result = (await this.getPool().run(span, {
        transferList: [request.buffer as ArrayBuffer],
      })) as Uint8Array;
      this.spansServed++;
      return result;
    } finally {
      this.spansWaiting--;
    }
  }

  private async poolPage(request: ScanRequest): Promise<ScanPage> {
    const task: ScanTask = {
      dataDir: this.config.dataDir,
      fragmentCount: this.config.fragments,
      groupCount: this.dispatcher.groupCount,
      request,
    };
    const result = await this.runPoolTask(task);
    return {
      done: result.done,
      resumeKey: result.resumeKey === undefined ? undefined : Buffer.from(result.resumeKey),
      entries: result.entries.map((e) => ({
        key: Buffer.from(e.key),
        record: e.record === undefined ? undefined : Buffer.from(e.record),
      })),
    };
  }

  private async runPoolTask(task: ScanTask): Promise<ScanPage> {
    if (this.poolWaiting >= POOL_QUEUE_TASKS_MAX) {
      throw backpressure(`background pool queue is full (${POOL_QUEUE_TASKS_MAX} tasks)`);
    }
    this.poolWaiting++;
    try {
      for (
        let wait = this.poolTokens.waitMs(Date.now());
        wait > 0;
        wait = this.poolTokens.waitMs(Date.now())
      ) {
        await new Promise((resolve) => setTimeout(resolve, wait));
      }
      assert(this.poolTokens.tryTake(Date.now()), 'a pool token was just available');
      return (await this.getPool().run(task)) as ScanPage;
    } catch (err) {
      if (err instanceof Error && err.message === 'Task queue is at limit') {
        throw backpressure('background pool queue is full');
      }
      throw err;
    } finally {
      this.poolWaiting--;
    }
  }

  private getPool(): Piscina {
    if (this.pool === undefined) {
      this.pool = new Piscina({
        filename: new URL('../workers/scan-task.js', import.meta.url).href,
        minThreads: 0,
        maxThreads: this.config.poolThreads,
        maxQueue: POOL_QUEUE_TASKS_MAX + ANTI_ENTROPY_POOL_TASKS_MAX,
        idleTimeout: 30_000,
        closeTimeout: POOL_CLOSE_TIMEOUT_MS,
        atomics: 'disabled',
      });
      this.pool.on('message', (message: unknown) => {
        if (isPoolThreadLoaded(message)) this.loadedPoolThreads.add(message.threadId);
      });
    }
    return this.pool;
  }
}

interface ScanPlan {
  examineLimit: number;
  start: Uint8Array | undefined;
  end: Uint8Array | undefined;
  pattern: Uint8Array | undefined;
  limit: number;
  keysOnly: boolean;
  expiry: boolean;
  priority: Priority;
  cursor: { fragment: number; resume: Buffer | undefined };
}

/** Validates scan options and narrows the key range by the prefix and the pattern's literal prefix. */
function planScan(options: ScanOptions): ScanPlan {
  const bytes = (name: string, v: string | Uint8Array | undefined) => {
    if (v === undefined) return undefined;
    if (typeof v === 'string') return Buffer.from(v, 'utf8');
    if (v instanceof Uint8Array) return v;
    throw invalidInput(`scan ${name} must be a string or Uint8Array`);
  };
  const prefix = bytes('prefix', options.prefix);
  let start = bytes('start', options.start);
  let end = bytes('end', options.end);
  const pattern = bytes('match', options.match);
  if (prefix !== undefined && (start !== undefined || end !== undefined)) {
    throw invalidInput('give a scan prefix or a start/end range, not both');
  }
  for (const [name, v] of [
    ['prefix', prefix],
    ['start', start],
    ['end', end],
  ] as const) {
    if (v !== undefined && v.length > KEY_BYTES_MAX)
      throw invalidInput(`scan ${name} is longer than a key can be`);
  }
  if (pattern !== undefined && pattern.length > SCAN_PATTERN_BYTES_MAX) {
    throw invalidInput(`scan pattern is ${pattern.length} bytes; the limit is ${SCAN_PATTERN_BYTES_MAX}`);
  }
  const limit = options.limit ?? SCAN_PAGE_KEYS_DEFAULT;
  if (!Number.isInteger(limit) || limit < 1 || limit > SCAN_PAGE_KEYS_MAX) {
    throw invalidInput(`scan limit must be an integer in 1..${SCAN_PAGE_KEYS_MAX}`);
  }
  const examineLimit = options.examineLimit ?? SCAN_EXAMINED_KEYS_MAX;
  if (!Number.isInteger(examineLimit) || examineLimit < 1 || examineLimit > SCAN_EXAMINED_KEYS_MAX) {
    throw invalidInput(`scan examineLimit must be an integer in 1..${SCAN_EXAMINED_KEYS_MAX}`);
  }
  const priority = options.priority === undefined ? Priority.Default : parsePriority(options.priority);
  if (priority === undefined) throw invalidInput(`priority must be one of ${PRIORITY_NAMES.join(', ')}`);
  const narrowing = prefix ?? (pattern !== undefined ? literalPrefix(pattern) : undefined);
  if (narrowing !== undefined && narrowing.length > 0) {
    const upper = prefixEnd(narrowing);
    if (start === undefined || Buffer.compare(narrowing, start) > 0) start = narrowing;
    if (upper !== undefined && (end === undefined || Buffer.compare(upper, end) < 0)) end = upper;
  }
  return {
    examineLimit,
    start,
    end,
    pattern: pattern !== undefined && pattern.length > 0 ? pattern : undefined,
    limit,
    keysOnly: options.keysOnly === true,
    expiry: options.expiry === true,
    priority,
    cursor: decodeCursor(options.cursor),
  };
}

/** The smallest key greater than every key with this prefix, or undefined if there is none (all 0xff). */
export function prefixEnd(prefix: Uint8Array): Buffer | undefined {
  const end = Buffer.from(prefix);
  for (let i = end.length - 1; i >= 0; i--) {
    if (end[i] !== 0xff) {
      end[i]++;
      return end.subarray(0, i + 1);
    }
  }
  return undefined;
}

/** Cursor: base64url of [version u8][fragment u16 BE][has resume u8][resume key]. */
export function encodeCursor(fragment: number, resume: Uint8Array | undefined): string {
  const buf = Buffer.alloc(CURSOR_HEADER_BYTES + (resume?.length ?? 0));
  buf[0] = CURSOR_VERSION;
  buf.writeUInt16BE(fragment, 1);
  buf[3] = resume === undefined ? 0 : 1;
  if (resume !== undefined) buf.set(resume, CURSOR_HEADER_BYTES);
  return buf.toString('base64url');
}

export function decodeCursor(cursor: string | undefined): { fragment: number; resume: Buffer | undefined } {
  if (cursor === undefined || cursor === '') return { fragment: 0, resume: undefined };
  if (typeof cursor !== 'string' || !/^[A-Za-z0-9_-]+$/.test(cursor))
    throw invalidInput('malformed scan cursor');
  const buf = Buffer.from(cursor, 'base64url');
  const resumeBytes = buf.length - CURSOR_HEADER_BYTES;
  if (
    buf.length < CURSOR_HEADER_BYTES ||
    buf[0] !== CURSOR_VERSION ||
    buf[3] > 1 ||
    resumeBytes > KEY_BYTES_MAX
  ) {
    throw invalidInput('malformed scan cursor');
  }
  if (buf[3] === 0 && resumeBytes !== 0) throw invalidInput('malformed scan cursor');
  return {
    fragment: buf.readUInt16BE(1),
    resume: buf[3] === 1 ? buf.subarray(CURSOR_HEADER_BYTES) : undefined,
  };
}

type Settle<T> = { resolve: (value: T) => void; reject: (error: TesseraError) => void };

const scanHandler: ResultHandler<Settle<ScanPage>> = {
  onResult(token, buf, at, length) {
    if (resultStatus(buf, at) === ResultKind.ScanPage) {
      token.resolve(readScanPage(buf, at + RESULT_HEADER_BYTES, at + length));
    } else {
      token.reject(resultError(buf, at, length));
    }
  },
  onFailure: (token, error) => token.reject(error),
};

const fenceHandler: ResultHandler<Settle<void>> = {
  onResult(token, buf, at, length) {
    if (resultStatus(buf, at) === Reply.FenceReached) token.resolve();
    else token.reject(resultError(buf, at, length));
  },
  onFailure: (token, error) => token.reject(error),
};
