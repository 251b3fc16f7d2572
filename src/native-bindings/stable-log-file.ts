// The stable log of one lmdb worker: how `stable` writes reach the disk without syncing the map.
//
// The env runs with `noSync` + `useWritemap`, so making a commit survive power loss by syncing the
// env writes back every page the commits since the last sync dirtied — for random keys, a page or
// more per write, several milliseconds under load. Instead each worker keeps an append-only file
// (`<dataDir>/lmdb/stable-<worker>.log`, opened O_DSYNC): every transaction it commits is also
// copied into an in-memory tail (src/core/stable-log.ts), and a stable fence writes that tail as one
// frame, which is on disk when the write returns — a few KiB appended per group instead of the map.
//
// The file is zero-filled ahead of its frames (STABLE_LOG_PREPARE_BYTES at a time, in the background
// pool of libuv) so that a frame's write overwrites blocks the file already has: an O_DSYNC write
// that grows a file must also make its new size durable, a journal commit each. A zero frame header
// ends the log (src/core/stable-log.ts).
//
// A checkpoint syncs the env and empties the file. The first fence after opening, a log grown past
// STABLE_LOG_FILE_BYTES_MAX, and a tail that overflowed (a long run of `store` writes with no
// stable one) each make the next fence a checkpoint. A node starting up replays every log into the
// store before its workers open it (`replayStableLogs`): records carry their LWW versions, so
// replaying what the store already holds changes nothing.

import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { storageError } from '../core/errors.js';
import {
  STABLE_LOG_FILE_BYTES_MAX,
  STABLE_LOG_PREPARE_BYTES,
  STABLE_LOG_PREPARE_FIRST_BYTES,
} from '../core/limits.js';
import { compareVersions, isWellFormedRecord, wallMsOf } from '../core/record.js';
import {
  readStableLog,
  STABLE_LOG_FRAME_HEADER_BYTES,
  type StableLogContents,
  StableLogCorrupt,
  type StableLogEntry,
  StableLogTail,
} from '../core/stable-log.js';
import type { FragmentWrites, KvStore } from './kv-store.js';

const fsync = promisify(fs.fsync);

const LOG_FILE_PATTERN = /^stable-(\d+)\.log$/;
/** Replayed entries per store commit: bounds one replay transaction. */
const REPLAY_COMMIT_ENTRIES_MAX = 4096;

export const stableLogFileName = (worker: number): string => `stable-${worker}.log`;

export class StableLogFile {
  /** A FileHandle, not a bare fd: a worker thread that dies closes it with its environment. */
  readonly #file: fs.promises.FileHandle;
  readonly #dir: string;
  readonly #tail = new StableLogTail();
  /**
   * True while every commit since the last checkpoint is in the file or the tail. False at open
   * (a previous holder of the file may have logged writes the env has not synced) and after the
   * tail overflowed or a frame failed to write: the next fence must then be a checkpoint.
   */
  #complete = false;
  /** Bytes of frames in the file: where the next frame goes. */
  #fileBytes = 0;
  /** The file's bytes before this are written (zeros or frames) and durable. */
  #preparedBytes = 0;
  /** A zero-fill in flight, extending the prepared bytes when it completes. */
  #preparing: Promise<void> | undefined;
  #dirSynced = false;

  private constructor(file: fs.promises.FileHandle, dir: string) {
    this.#file = file;
    this.#dir = dir;
  }

  /** Opens (creating) a worker's log without truncating it: its contents wait for a checkpoint. */
  static async open(dir: string, worker: number): Promise<StableLogFile> {
    const { O_WRONLY, O_CREAT, O_DSYNC } = fs.constants;
    const file = await fs.promises.open(
      path.join(dir, stableLogFileName(worker)),
      O_WRONLY | O_CREAT | O_DSYNC,
      0o644,
    );
    return new StableLogFile(file, dir);
  }

  /** False until the next checkpoint once the log is incomplete: commits need not be recorded. */
  get recording(): boolean {
    return this.#complete;
  }

  /** Records one committed write; a no-op until the next checkpoint once the log is incomplete. */
  record(fragment: number, key: Uint8Array, record: Uint8Array): void {
    if (!this.#complete) return;
    if (!this.#tail.append(fragment, key, record)) {
      this.#complete = false;
      this.#tail.clear();
    }
  }

  needsCheckpoint(): boolean {
    return !this.#complete || this.#fileBytes >= STABLE_LOG_FILE_BYTES_MAX;
  }

  /**
   * Called just before the store's own fsync starts: what is committed so far is the fsync's to
   * cover, and every later commit is logged again.
   */
  beginCheckpoint(): void {
    this.#tail.clear();
    this.#complete = true;
  }

  /**
   * Some committed change cannot be replayed from the log (a removal, a failed store fsync): the
   * next fence is a checkpoint.
   */
  markIncomplete(): void {
    this.#complete = false;
  }

  /**
   * After the store's fsync: the file's frames are covered, so it starts over, its first
   * STABLE_LOG_PREPARE_FIRST_BYTES zero-filled again before the next frame.
   */
  async endCheckpoint(): Promise<void> {
    await this.#preparing;
    await this.#file.truncate(0);
    this.#fileBytes = 0;
    this.#preparedBytes = 0;
    if (!this.#dirSynced) {
      // The file may be new: its name must survive power loss before its frames are relied on.
      await fsyncDirectory(this.#dir);
      this.#dirSynced = true;
    }
    this.#prepare(STABLE_LOG_PREPARE_FIRST_BYTES);
    await this.#preparing;
  }

  /**
   * Writes the tail as one frame; when it returns, every logged commit is on disk. The write is
   * synchronous, on the worker's own thread: one O_DSYNC append (~0.4–1.3 ms here) blocks the
   * worker for less than the two thread hops of a libuv write cost on busy cores — pipelined
   * `stable` SETs ran 30–45 % faster (bench/RESULTS.md "Stable log append").
   */
  async flush(): Promise<void> {
    const frame = this.#tail.seal();
    if (frame === undefined) return;
    // A frame past the prepared bytes must not race the zero-fill writing there.
    if (this.#preparing !== undefined && this.#fileBytes + frame.length > this.#preparedBytes)
      await this.#preparing;
    try {
      const bytesWritten = fs.writeSync(this.#file.fd, frame, 0, frame.length, this.#fileBytes);
      if (bytesWritten !== frame.length) {
        // A regular file takes less than a whole write only when its disk (or quota) has no more room.
        throw new Error(
          `disk full: the stable log's write stopped at ${bytesWritten} of ${frame.length} bytes`,
        );
      }
    } catch (err) {
      // The frame may be half on disk; the next checkpoint covers its writes instead.
      this.#complete = false;
      throw err;
    }
    this.#fileBytes += frame.length;
    if (this.#preparedBytes - this.#fileBytes < STABLE_LOG_PREPARE_BYTES / 2) this.#prepare();
  }

  /**
   * Zero-fills the file up to `bytes` past the frames, in the background. A failed fill only leaves
   * later frames to grow the file as they are written (which reports a full disk).
   */
  #prepare(bytes = STABLE_LOG_PREPARE_BYTES): void {
    if (this.#preparing !== undefined) return;
    const from = Math.max(this.#preparedBytes, this.#fileBytes);
    const to = this.#fileBytes + bytes;
    this.#preparing = this.#file
      .write(zeroFill(to - from), 0, to - from, from)
      .then(
        () => {
          this.#preparedBytes = to;
        },
        () => {},
      )
      .finally(() => {
        this.#preparing = undefined;
      });
  }

  async close(): Promise<void> {
    await this.#preparing;
    await this.#file.close();
  }
}

/** False when the file's first bytes are absent or zero: no frame was ever written over them. */
async function holdsFrames(file: string): Promise<boolean> {
  const handle = await fs.promises.open(file, 'r');
  try {
    const head = Buffer.alloc(STABLE_LOG_FRAME_HEADER_BYTES);
    const { bytesRead } = await handle.read(head, 0, head.length, 0);
    return head.subarray(0, bytesRead).some((byte) => byte !== 0);
  } finally {
    await handle.close();
  }
}

let zeros: Buffer | undefined;

/** `bytes` zero bytes (a view of one shared buffer: nothing ever writes into it). */
function zeroFill(bytes: number): Buffer {
  if (zeros === undefined || zeros.length < bytes)
    zeros = Buffer.alloc(Math.max(bytes, STABLE_LOG_PREPARE_BYTES));
  return zeros.subarray(0, bytes);
}

async function fsyncDirectory(dir: string): Promise<void> {
  const fd = fs.openSync(dir, 'r');
  try {
    await fsync(fd);
  } finally {
    fs.closeSync(fd);
  }
}

export interface StableLogReplay {
  files: number;
  /** Entries read from whole frames. */
  entries: number;
  /** Entries newer than what the store held, now written to it. */
  applied: number;
  /** Bytes of torn frames at the ends of the files (writes never acknowledged). */
  tornBytes: number;
}

/**
 * The stable logs in an env directory that hold anything (absent directory: none). Every worker
 * creates its log when it opens the store, so an empty one — no bytes, or zeros where its first
 * frame would start — is the common case and needs no replay.
 */
export async function stableLogFiles(dir: string): Promise<string[]> {
  let names: string[];
  try {
    names = (await fs.promises.readdir(dir)).filter((name) => LOG_FILE_PATTERN.test(name)).sort();
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw err;
  }
  const held = await Promise.all(names.map((name) => holdsFrames(path.join(dir, name))));
  return names.filter((_, i) => held[i]);
}

/**
 * Merges the stable logs `files` of `dir` into `store` (opened without a log of its own, every fragment
 * open), syncs the store, then removes the logs. A log whose checksummed contents are malformed
 * stops the start with a storage error naming it: it is kept for the operator.
 */
export async function replayStableLogs(
  dir: string,
  files: string[],
  store: KvStore,
  fragmentCount: number,
): Promise<StableLogReplay> {
  const report: StableLogReplay = { files: 0, entries: 0, applied: 0, tornBytes: 0 };
  for (const name of files) {
    const file = path.join(dir, name);
    const bytes = await fs.promises.readFile(file);
    let contents: StableLogContents;
    try {
      contents = readStableLog(bytes);
    } catch (err) {
      if (err instanceof StableLogCorrupt)
        throw storageError(`stable log ${file} is corrupt: ${err.message}`);
      throw err;
    }
    report.files++;
    report.entries += contents.entries.length;
    report.tornBytes += contents.tornBytes;
    for (let at = 0; at < contents.entries.length; at += REPLAY_COMMIT_ENTRIES_MAX) {
      const chunk = contents.entries.slice(at, at + REPLAY_COMMIT_ENTRIES_MAX);
      report.applied += await mergeChunk(store, chunk, fragmentCount, file);
    }
  }
  if (files.length === 0) return report;
  await store.sync();
  for (const name of files) await fs.promises.rm(path.join(dir, name));
  await fsyncDirectory(dir);
  return report;
}

/** Commits the entries of `chunk` that are newer than the store's records; returns how many. */
async function mergeChunk(
  store: KvStore,
  chunk: readonly StableLogEntry[],
  fragmentCount: number,
  file: string,
): Promise<number> {
  // Within a chunk a later entry for a key is compared with the earlier one staged, not the store.
  const staged = new Map<string, Uint8Array>();
  const writes = new Map<number, FragmentWrites>();
  let applied = 0;
  for (const { fragment, key, record } of chunk) {
    if (fragment >= fragmentCount || !isWellFormedRecord(record)) {
      throw storageError(
        `stable log ${file} holds an entry for fragment ${fragment} that this store cannot take`,
      );
    }
    const id = `${fragment}:${key.toString('latin1')}`;
    const current = staged.get(id) ?? store.get(fragment, key);
    if (current !== undefined && compareVersions(record, current) <= 0) continue;
    staged.set(id, record);
    let w = writes.get(fragment);
    if (w === undefined) {
      w = { fragment, puts: [], deletes: [], highWaterWallMs: 0 };
      writes.set(fragment, w);
    }
    w.puts.push([key, record]);
    w.highWaterWallMs = Math.max(w.highWaterWallMs, wallMsOf(record));
    applied++;
  }
  if (writes.size > 0) await store.commit([...writes.values()]);
  return applied;
}
