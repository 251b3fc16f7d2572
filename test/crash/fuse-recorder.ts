// A recording FUSE passthrough file system, in the spirit of LazyFS: mounted over a directory, it
// passes every operation through to a backing directory and records each write, size change,
// fsync and namespace change in an op log (./op-log.ts), from which ./crash-states.ts builds the
// states a disk could hold after a power loss. It speaks the kernel's /dev/fuse protocol
// (./fuse-wire.ts) directly: no libfuse, no native code.
//
//   node .build/test/crash/fuse-recorder.js --backing <dir> --mount <dir> --log <file>
//
// prints `ready` once the kernel's INIT is answered; on SIGTERM/SIGINT (or an unmount from
// outside) it unmounts, writes the log and exits 0. Tests use startRecorder().
//
// Shape of the process: the main thread opens /dev/fuse, mounts (mount(8) with fd=3; root only, no
// fusermount here), and starts one worker thread that serves requests in a blocking loop — read a
// request, do it on the backing directory with fs.*Sync, record, reply — and owns the log. The main
// thread only waits for signals: a thread blocked in read(2) on /dev/fuse never returns to its
// event loop, so signal handlers must live elsewhere. The loop ends when the read fails with
// ENODEV (unmounted) or on DESTROY; it then flushes the log.
//
// Negotiated so that the recording sees what a disk would: no writeback cache (a write(2) reaches
// us before it returns; fsync(2) arrives as FSYNC after the dirty pages' WRITEs), no direct I/O
// (shared writable mmap works through the page cache; its dirty pages arrive as WRITEs when
// written back, by msync/fsync, close or the flusher), no remote POSIX or flock locks (the kernel
// keeps fcntl/flock locks locally, which LMDB's and LevelDB's lock files rely on), no atomic
// O_TRUNC (an open with O_TRUNC arrives as SETATTR size 0, recorded as a truncate). An O_DSYNC or
// O_SYNC write arrives as WRITE then FSYNC (datasync for O_DSYNC), and is recorded as such.

import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads';
import { killedAfterTests } from '../integration/children.js';
import { FusePassthrough } from './fuse-passthrough.js';
import { encodeReply, IN_HEADER_BYTES, Opcode, opcodeName, readInHeader } from './fuse-wire.js';
import { encodeOp, OP_LOG_MAGIC, type Op } from './op-log.js';

/** The largest WRITE the kernel may send; 256 pages is the kernel's default fuse max_pages_limit. */
export const MAX_WRITE_BYTES = 1024 * 1024;
/** A request is one read: header, fuse_write_in and up to MAX_WRITE_BYTES of data, with room to spare. */
const READ_BUFFER_BYTES = MAX_WRITE_BYTES + 64 * 1024;
/** The log is written out when this much is buffered (and at the end). */
const LOG_FLUSH_BYTES = 16 * 1024 * 1024;
/** The `source` of the mount, as `mount` lists it: `grep tessera-crashsim` finds stale mounts. */
export const MOUNT_SOURCE = 'tessera-crashsim';
const READY_TIMEOUT_MS = 15_000;
/** How long stop() waits for the daemon to exit after the unmount. */
const STOP_TIMEOUT_MS = 60_000;
const PARENT_POLL_MS = 1_000;
/** TESSERA_FUSE_TRACE=1: one line per request on stderr (opcode, node, length), to see what the kernel sends. */
const TRACE = process.env.TESSERA_FUSE_TRACE === '1';

interface DaemonArgs {
  backing: string;
  mount: string;
  log: string;
  watchParent: boolean;
}

/** The op log, buffered in memory and appended to its file in big writes. */
export class OpLogSink {
  readonly #fd: number;
  #chunks: Buffer[] = [];
  #bytes = 0;

  constructor(path: string) {
    this.#fd = fs.openSync(path, 'w', 0o644);
    this.#chunks.push(OP_LOG_MAGIC);
  }

  append(op: Op): void {
    const record = encodeOp(op);
    this.#chunks.push(record);
    this.#bytes += record.length;
    if (this.#bytes >= LOG_FLUSH_BYTES) this.flush();
  }

  flush(): void {
    const all = Buffer.concat(this.#chunks);
    for (let done = 0; done < all.length; ) done += fs.writeSync(this.#fd, all, done);
    this.#chunks = [];
    this.#bytes = 0;
  }

  close(): void {
    this.flush();
    fs.fsyncSync(this.#fd);
    fs.closeSync(this.#fd);
  }
}

/** The worker: serves /dev/fuse until unmounted, then writes out the log. */
function serve(fuseFd: number, backing: string, logPath: string): void {
  const log = new OpLogSink(logPath);
  const passthrough = new FusePassthrough(backing, (op) => log.append(op), MAX_WRITE_BYTES);
  const buf = Buffer.alloc(READ_BUFFER_BYTES);
  try {
    for (let n = readRequest(fuseFd, buf); n > 0; n = readRequest(fuseFd, buf)) {
      // The op's time is when its request arrived, taken before any work on it.
      if (!serveOne(fuseFd, passthrough, buf.subarray(0, n), process.hrtime.bigint())) break;
    }
  } finally {
    log.close();
  }
}

/** Answers one request; false when serving is over (DESTROY, or the connection is gone). */
function serveOne(fuseFd: number, passthrough: FusePassthrough, request: Buffer, atNs: bigint): boolean {
  if (request.length < IN_HEADER_BYTES) {
    process.stderr.write(`fuse-recorder: short request (${request.length} bytes) ignored\n`);
    return true;
  }
  const header = readInHeader(request);
  if (TRACE)
    process.stderr.write(`fuse: ${opcodeName(header.opcode)} node ${header.nodeid} len ${header.len}\n`);
  const reply = passthrough.handle(header, request.subarray(IN_HEADER_BYTES, header.len), atNs);
  if (reply !== undefined && !writeReply(fuseFd, encodeReply(header.unique, reply.error, reply.payload))) {
    return false;
  }
  if (header.opcode === Opcode.INIT && reply?.error === 0) parentPort?.postMessage('ready');
  return header.opcode !== Opcode.DESTROY;
}

/** One request's bytes, or 0 once the file system is unmounted. */
function readRequest(fd: number, buf: Buffer): number {
  for (;;) {
    try {
      return fs.readSync(fd, buf, 0, buf.length, null);
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (code === 'ENODEV') return 0;
      // EINTR: a signal; ENOENT: the request was interrupted before we took it. Both: read again.
      if (code === 'EINTR' || code === 'ENOENT' || code === 'EAGAIN') continue;
      throw error;
    }
  }
}

/**
 * False once the connection is gone. A reply to a request the kernel gave up on (ENOENT) is
 * dropped; one the kernel refuses (EINVAL: a reply we built wrong) is reported, and the loop goes on.
 */
function writeReply(fd: number, reply: Buffer): boolean {
  try {
    fs.writeSync(fd, reply);
    return true;
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENODEV') return false;
    if (code !== 'ENOENT')
      process.stderr.write(`fuse-recorder: reply refused: ${(error as Error).message}\n`);
    return true;
  }
}

function mountFuse(fuseFd: number, mount: string): void {
  const uid = process.getuid?.() ?? 0;
  const gid = process.getgid?.() ?? 0;
  const options = `fd=3,rootmode=40000,user_id=${uid},group_id=${gid},allow_other,default_permissions`;
  const r = spawnSync('mount', ['-t', 'fuse', '-o', options, MOUNT_SOURCE, mount], {
    stdio: ['ignore', 'inherit', 'inherit', fuseFd],
  });
  if (r.status !== 0)
    throw new Error(`mount -t fuse on ${mount} failed (status ${r.status}, ${r.error ?? ''})`);
}

/** umount, or a lazy umount when busy; true when something was unmounted. */
export function unmount(mount: string): boolean {
  if (spawnSync('umount', [mount], { stdio: 'ignore' }).status === 0) return true;
  return spawnSync('umount', ['-l', mount], { stdio: 'ignore' }).status === 0;
}

/**
 * Whether `dir` is a mount point of this recorder, from /proc/self/mountinfo. Only `dir`'s parent is
 * resolved: touching the mount point itself would wait on the daemon, which may be gone.
 */
export function isRecorderMount(dir: string): boolean {
  const real = path.join(fs.realpathSync(path.dirname(path.resolve(dir))), path.basename(dir));
  const unescapeOctal = (field: string) =>
    field.replace(/\\([0-7]{3})/g, (_, o) => String.fromCharCode(parseInt(o, 8)));
  return fs
    .readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .some((line) => {
      const [before, after] = line.split(' - ');
      return unescapeOctal(before?.split(' ')[4] ?? '') === real && after?.split(' ')[1] === MOUNT_SOURCE;
    });
}

function parseArgs(argv: readonly string[]): DaemonArgs {
  const value = (name: string): string => {
    const i = argv.indexOf(`--${name}`);
    if (i < 0 || argv[i + 1] === undefined) throw new Error(`missing --${name} <path>`);
    return argv[i + 1];
  };
  return {
    backing: value('backing'),
    mount: value('mount'),
    log: value('log'),
    watchParent: argv.includes('--watch-parent'),
  };
}

/** The daemon's main thread: mount, start the serving worker, unmount on a signal or when orphaned. */
function daemonMain(args: DaemonArgs): void {
  process.umask(0); // the kernel has already applied the caller's umask to create/mkdir modes
  const fuseFd = fs.openSync('/dev/fuse', 'r+');
  mountFuse(fuseFd, args.mount);
  const worker = new Worker(fileURLToPath(import.meta.url), {
    workerData: { fuseFd, backing: args.backing, log: args.log },
  });
  let stopping = false;
  const stop = () => {
    if (stopping) process.exit(1); // a second signal: give up waiting
    stopping = true;
    unmount(args.mount);
  };
  worker.on('message', (m) => m === 'ready' && process.stdout.write('ready\n'));
  worker.on('error', (error) => {
    process.stderr.write(`fuse-recorder: ${error.stack ?? error}\n`);
    // Closing the device first aborts the connection: an unmount would otherwise wait on requests
    // (write-back of dirty pages) that nobody will answer.
    fs.closeSync(fuseFd);
    unmount(args.mount);
    process.exit(1);
  });
  worker.on('exit', (code) => {
    if (!stopping && isRecorderMount(args.mount)) unmount(args.mount);
    process.exit(code);
  });
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  if (args.watchParent) {
    const parent = process.ppid;
    setInterval(() => process.ppid !== parent && !stopping && stop(), PARENT_POLL_MS);
  }
}

/** Why this machine cannot mount the recorder, or undefined when it can (tried with a throwaway mount). */
export function fuseUnavailable(): string | undefined {
  if (process.platform !== 'linux' || process.getuid?.() !== 0) return 'not root on Linux';
  let fd: number;
  try {
    fd = fs.openSync('/dev/fuse', 'r+');
  } catch (error) {
    return `cannot open /dev/fuse: ${(error as NodeJS.ErrnoException).code}`;
  }
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tessera-fuse-probe-'));
  try {
    const options = 'fd=3,rootmode=40000,user_id=0,group_id=0';
    const r = spawnSync('mount', ['-t', 'fuse', '-o', options, 'tessera-crashsim-probe', dir], {
      stdio: ['ignore', 'ignore', 'ignore', fd],
    });
    if (r.status !== 0) return `mount -t fuse failed (${r.error?.message ?? `status ${r.status}`})`;
    fs.closeSync(fd); // aborts the connection: the unmount below does not wait for an INIT reply
    fd = -1;
    unmount(dir);
    return undefined;
  } finally {
    if (fd >= 0) fs.closeSync(fd);
    fs.rmdirSync(dir);
  }
}

export interface RecorderOptions {
  backing: string;
  mount: string;
  log: string;
}

export interface Recorder {
  readonly pid: number;
  /** Unmounts (lazily if busy), waits for the daemon to write its log and exit. */
  stop(): Promise<void>;
}

/** Spawns the daemon and waits until the mount answers. */
export async function startRecorder(options: RecorderOptions): Promise<Recorder> {
  const script = fileURLToPath(import.meta.url);
  const args = [
    '--backing',
    options.backing,
    '--mount',
    options.mount,
    '--log',
    options.log,
    '--watch-parent',
  ];
  const child = killedAfterTests(
    spawn(process.execPath, [script, ...args], { stdio: ['ignore', 'pipe', 'pipe'] }),
  );
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    stderr += chunk.toString();
    process.stderr.write(chunk);
  });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  try {
    await waitForReady(child, exited);
  } catch (error) {
    child.kill('SIGKILL');
    await exited; // its /dev/fuse fd closed, the connection is aborted and the unmount cannot hang
    if (isRecorderMount(options.mount)) unmount(options.mount);
    throw new Error(`fuse-recorder did not start: ${(error as Error).message}\n${stderr}`);
  }
  return {
    pid: child.pid ?? -1,
    async stop() {
      unmount(options.mount);
      const code = await Promise.race([exited, timeout(STOP_TIMEOUT_MS)]);
      if (code === 'timeout') {
        child.kill('SIGKILL');
        throw new Error(
          `fuse-recorder did not exit ${STOP_TIMEOUT_MS} ms after the unmount (files still open?)`,
        );
      }
      if (code !== 0) throw new Error(`fuse-recorder exited with ${code}\n${stderr}`);
    },
  };
}

async function waitForReady(child: ChildProcess, exited: Promise<number | null>): Promise<void> {
  const ready = new Promise<void>((resolve) => {
    let out = '';
    child.stdout?.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      if (out.includes('ready\n')) resolve();
    });
  });
  const outcome = await Promise.race([
    ready.then(() => 'ready' as const),
    exited.then((code) => `exited with ${code}`),
    timeout(READY_TIMEOUT_MS).then(() => `no "ready" within ${READY_TIMEOUT_MS} ms`),
  ]);
  if (outcome !== 'ready') throw new Error(outcome);
}

function timeout(ms: number): Promise<'timeout'> {
  return new Promise((resolve) => setTimeout(() => resolve('timeout'), ms).unref());
}

if (!isMainThread && workerData?.fuseFd !== undefined) {
  const data = workerData as { fuseFd: number; backing: string; log: string };
  serve(data.fuseFd, data.backing, data.log);
} else if (isMainThread && process.argv[1] === fileURLToPath(import.meta.url)) {
  try {
    daemonMain(parseArgs(process.argv.slice(2)));
  } catch (error) {
    process.stderr.write(`fuse-recorder: ${(error as Error).message}\n`);
    process.exit(2);
  }
}
