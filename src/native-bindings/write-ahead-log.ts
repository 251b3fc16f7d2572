// The lmdb store's write-ahead log: one per group's env, kept by the worker that writes the group.
//
// LMDB flushes each transaction's pages before the next commits (lmdb-store.ts), so a write that
// waited for its transaction waited for the disk: ~14 ms for a turn of scattered SETs. Instead a
// worker appends each turn's writes here (one `write` of one frame, src/core/stable-log.ts) and
// acknowledges `store` writes once they are in the file, `stable` ones once it is fdatasynced — one
// sequential write and flush however many pages the writes touch. The transactions follow at their
// own pace, each taking every logged write not yet committed, so a hot page is written once per
// transaction rather than once per turn.
//
// Files: `<group dir>/wal-<n>.log`, appended to until its segment size, then followed by
// `wal-<n+1>.log`; the ended segment's fdatasync and the new name's directory fsync run in the
// background, and the next `sync` waits for them (a failed one fails every later `sync`: what it
// covered may not be on disk, and no retry can tell). A segment is removed once every fragment that wrote to it had a commit made after its last append
// there succeed and the env has flushed it (`committed`): its writes are then in LMDB's flushed
// state. What a commit covers is told by the actor's generations (FragmentWrites.generation): a
// commit of generation G holds every write of that fragment logged at a generation up to G. A dropped fragment's entries are voided by a drop marker, so they never hold a segment.
//
// Opening a store replays every segment into the env (records are versioned: a replay is a merge),
// flushes it and removes them, then starts a fresh segment. A power loss can tear a segment's
// unsynced tail; reading a segment stops at its first torn frame, whose writes were never
// acknowledged at `stable`, and goes on with the next.

import fs from 'node:fs';
import path from 'node:path';
import { pino } from 'pino';
import { storageError } from '../core/errors.js';
import { WAL_SEGMENT_BYTES_DEFAULT } from '../core/limits.js';
import { readStableLog, StableLogCorrupt, StableLogTail } from '../core/stable-log.js';
import { fsyncPath } from './fsync-path.js';
import type { FragmentWrites, KvStore, LogReplay } from './kv-store.js';
import { mergeLogEntries } from './stable-log-file.js';

/** The log's own failures (an append, a rotation, a removal): rare, and each one is worth a line. */
const logger = pino({ base: { pid: process.pid, component: 'write-ahead-log' } });

const SEGMENT_PATTERN = /^wal-(\d+)\.log$/;
const segmentName = (n: number): string => `wal-${String(n).padStart(8, '0')}.log`;

/** A segment written to before the current one, kept until its writes are in LMDB's flushed state. */
interface ClosedSegment {
  file: string;
  /** Its descriptor, closed once the syncs started before the rotation settle. */
  fd: number;
  syncsBefore: Promise<void>;
  /** Fragment → the generation a successful commit of it must reach. */
  waiting: Map<number, number>;
}

/** The segments in `dir`, oldest first. */
function segmentsIn(dir: string): string[] {
  return fs
    .readdirSync(dir)
    .filter((name) => SEGMENT_PATTERN.test(name))
    .sort((a, b) => Number(SEGMENT_PATTERN.exec(a)![1]) - Number(SEGMENT_PATTERN.exec(b)![1]));
}

/**
 * Replays the segments of `dir` into `store` (fragments `accepts` takes), flushes the store
 * (`flushed`), removes them and syncs the directory. A segment whose checksummed contents are
 * malformed stops it with a storage error naming the file: the file is kept for the operator.
 */
export async function replayWal(
  dir: string,
  store: KvStore,
  accepts: (fragment: number) => boolean,
  flushed: () => Promise<void>,
): Promise<LogReplay> {
  const report: LogReplay = { segments: 0, entries: 0, applied: 0, tornBytes: 0 };
  const names = segmentsIn(dir);
  if (names.length === 0) return report;
  for (const name of names) {
    const file = path.join(dir, name);
    const bytes = await fs.promises.readFile(file);
    let contents: ReturnType<typeof readStableLog>;
    try {
      contents = readStableLog(bytes);
    } catch (err) {
      if (err instanceof StableLogCorrupt)
        throw storageError(`write-ahead log ${file} is corrupt: ${err.message}`);
      throw err;
    }
    report.segments++;
    report.entries += contents.entries.length;
    report.tornBytes += contents.tornBytes;
    report.applied += await mergeLogEntries(store, contents.entries, `write-ahead log ${file}`, accepts);
  }
  await flushed();
  for (const name of names) await fs.promises.rm(path.join(dir, name));
  await fsyncPath(dir);
  return report;
}

export class WriteAheadLog {
  readonly #dir: string;
  readonly #flushed: () => Promise<void>;
  readonly #tail = new StableLogTail();
  #segment: number;
  #fd: number;
  #bytes = 0;
  /** Bytes after which the segment ends (`--wal-segment-size`). */
  readonly #segmentBytes: number;
  /** Fragment → the generation of its last append to the current segment. */
  #lastAppend = new Map<number, number>();
  /** Fragment → the generation of its newest successful commit. */
  readonly #committedAt = new Map<number, number>();
  readonly #closed: ClosedSegment[] = [];
  /** The removal of ready segments under way, if any. */
  #retiring: Promise<void> | undefined;
  /** The last fdatasync started: a rotated segment's descriptor outlives it. */
  #lastSync: Promise<void> = Promise.resolve();
  /** Every rotation's fdatasync of the segment it ended and fsync of the new one's name. */
  #rotations: Promise<void> = Promise.resolve();
  /** Failed appends since the env's last flush: `sync` then waits for that flush too. */
  #failures = 0;
  #open = true;

  private constructor(
    dir: string,
    segment: number,
    fd: number,
    flushed: () => Promise<void>,
    segmentBytes: number,
  ) {
    this.#dir = dir;
    this.#segment = segment;
    this.#fd = fd;
    this.#flushed = flushed;
    this.#segmentBytes = segmentBytes;
  }

  /** Starts a fresh log in `dir` (replayed and emptied first: `replayWal`). */
  static async create(
    dir: string,
    flushed: () => Promise<void>,
    segmentBytes = WAL_SEGMENT_BYTES_DEFAULT,
  ): Promise<WriteAheadLog> {
    const fd = fs.openSync(path.join(dir, segmentName(1)), 'wx');
    await fsyncPath(dir);
    return new WriteAheadLog(dir, 1, fd, flushed, segmentBytes);
  }

  /**
   * Appends the puts of `writes` as one frame (more if they pass STABLE_LOG_FRAME_BYTES_MAX);
   * undefined once the file holds them, else why not. On a failed write the file is cut back to its
   * last whole frame.
   */
  append(writes: readonly FragmentWrites[]): string | undefined {
    const tail = this.#tail;
    const start = this.#bytes;
    try {
      for (const w of writes) {
        for (const [key, record] of w.puts) {
          if (!tail.append(w.fragment, key, record)) {
            this.#writeFrame();
            tail.append(w.fragment, key, record);
          }
        }
      }
      this.#writeFrame();
    } catch (err) {
      return this.#failed(start, err);
    }
    for (const w of writes) this.#lastAppend.set(w.fragment, w.generation ?? 0);
    if (this.#bytes >= this.#segmentBytes) this.#rotateQuietly();
    return undefined;
  }

  /**
   * Appends a marker voiding the fragment's entries before it (the fragment is being dropped), and
   * stops waiting for its commits: it will have none. An actor made for it later counts its
   * generations from 1 again, so what its commits reached is forgotten too.
   */
  appendDrop(fragment: number): void {
    const start = this.#bytes;
    try {
      this.#tail.appendDrop(fragment);
      this.#writeFrame();
    } catch (err) {
      this.#failed(start, err);
      throw storageError(`the write-ahead log of ${this.#dir} could not mark fragment ${fragment} dropped`);
    }
    this.#lastAppend.delete(fragment);
    this.#committedAt.delete(fragment);
    for (const segment of this.#closed) segment.waiting.delete(fragment);
    this.#retireReady();
  }

  /** The commit of `writes` succeeded: segments whose writes it completes may go. */
  committed(writes: readonly FragmentWrites[]): void {
    for (const w of writes) {
      const f = w.fragment;
      const reached = Math.max(this.#committedAt.get(f) ?? 0, w.generation ?? 0);
      this.#committedAt.set(f, reached);
      for (const segment of this.#closed) {
        const need = segment.waiting.get(f);
        if (need !== undefined && reached >= need) segment.waiting.delete(f);
      }
    }
    this.#retireReady();
  }

  /**
   * Resolves once every frame appended before the call is on disk; with a failed append since the
   * env's last flush, once that flush is done too (those writes are safe only in LMDB).
   */
  async sync(): Promise<void> {
    const failures = this.#failures;
    // The segments ended since the last sync are made durable by their rotation (`#rotate`).
    const rotations = this.#rotations;
    const synced = fdatasync(this.#fd);
    this.#lastSync = synced.catch(ignore);
    await Promise.all([synced, rotations]);
    if (failures > 0) {
      await this.#flushed();
      this.#failures -= failures;
    }
  }

  /** Closes the files; the segments stay, for the next opening to replay. */
  async close(): Promise<void> {
    if (!this.#open) return;
    this.#open = false;
    await this.#retiring;
    await this.#lastSync;
    for (const segment of this.#closed) await segment.syncsBefore;
    for (const fd of [this.#fd, ...this.#closed.map((s) => s.fd)]) fs.closeSync(fd);
    this.#closed.length = 0;
  }

  #writeFrame(): void {
    const frame = this.#tail.frame();
    if (frame === undefined) return;
    let written = 0;
    while (written < frame.length)
      written += fs.writeSync(this.#fd, frame, written, frame.length - written, this.#bytes + written);
    this.#bytes += frame.length;
    this.#tail.clear();
  }

  /** Cuts a failed append off the file; returns the failure, for the caller's rate-limited log. */
  #failed(start: number, err: unknown): string {
    this.#tail.clear();
    this.#failures++;
    try {
      fs.ftruncateSync(this.#fd, start);
      this.#bytes = start;
    } catch {
      // The torn frame stays; replay stops at it. Later frames must not follow it: a new segment.
      this.#bytes = this.#segmentBytes;
      this.#rotateQuietly();
    }
    return `write-ahead log append to ${path.join(this.#dir, segmentName(this.#segment))} failed: ${err instanceof Error ? err.message : String(err)}`;
  }

  /**
   * Ends the current segment and starts the next. The ended one's fdatasync and the directory's
   * fsync (the new name) run in the background — a segment's worth of unsynced pages would stall the
   * worker — and the next `sync` waits for them. A power loss before they finish may tear the ended
   * segment while the next holds frames: replay reads every segment, and each entry merges by its
   * version, so nothing a `sync` covered is lost.
   */
  #rotate(): void {
    const next = this.#segment + 1;
    const file = path.join(this.#dir, segmentName(next));
    const fd = fs.openSync(file, 'wx');
    const ended = Promise.all([fdatasync(this.#fd), fsyncPath(this.#dir)]).then(ignore);
    // A failure is the next `sync`'s to report; until then it is not unhandled.
    ended.catch(ignore);
    this.#rotations = Promise.all([this.#rotations, ended]).then(ignore);
    const waiting = new Map<number, number>();
    for (const [f, last] of this.#lastAppend)
      if ((this.#committedAt.get(f) ?? 0) < last) waiting.set(f, last);
    this.#closed.push({
      file: path.join(this.#dir, segmentName(this.#segment)),
      fd: this.#fd,
      syncsBefore: Promise.all([this.#lastSync, ended]).then(ignore, ignore),
      waiting,
    });
    this.#segment = next;
    this.#fd = fd;
    this.#bytes = 0;
    this.#lastAppend = new Map();
    this.#retireReady();
  }

  #rotateQuietly(): void {
    try {
      this.#rotate();
    } catch (err) {
      logger.error(
        { dir: this.#dir, err: err instanceof Error ? err.message : String(err) },
        'write-ahead log could not start a new segment',
      );
    }
  }

  /** Removes the oldest segments whose writes are all committed, once the env has flushed them. */
  #retireReady(): void {
    if (!this.#open || this.#retiring !== undefined) return;
    let ready = 0;
    while (ready < this.#closed.length && this.#closed[ready].waiting.size === 0) ready++;
    if (ready === 0) return;
    this.#retiring = this.#retire(ready).then(
      () => {
        this.#retiring = undefined;
        this.#retireReady();
      },
      (err: unknown) => {
        this.#retiring = undefined;
        logger.error(
          { dir: this.#dir, err: err instanceof Error ? err.message : String(err) },
          'write-ahead log segment could not be removed; it is replayed at the next start',
        );
      },
    );
  }

  /** Removes the `count` oldest segments, whose commits succeeded, once the env has flushed them. */
  async #retire(count: number): Promise<void> {
    await this.#flushed();
    for (let i = 0; i < count; i++) {
      const segment = this.#closed[0];
      await segment.syncsBefore;
      fs.closeSync(segment.fd);
      this.#closed.shift();
      await fs.promises.rm(segment.file);
    }
    await fsyncPath(this.#dir);
  }
}

function ignore(): void {}

function fdatasync(fd: number): Promise<void> {
  return new Promise<void>((resolve, reject) =>
    fs.fdatasync(fd, (err) => (err === null ? resolve() : reject(err))),
  );
}
