// Shared helpers for tests of the RESP face: a node with its RESP server on an ephemeral loopback
// port, ioredis clients that never reconnect behind a test's back, and a raw socket that sends
// exact bytes and reads exact replies (for RESP3 types, protocol errors and misbehaving clients).

import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { connect, type Socket } from 'node:net';
import { Redis, type RedisOptions } from 'ioredis';
import pino from 'pino';
import { freePorts } from '../../bench/ports.js';
import type { TesseraOptions } from '../../src/main/config.js';
import { Tessera } from '../../src/main/node.js';
import { RespServer, type RespServerOptions } from '../../src/main/resp/server.js';
import { killedAfterTests, releasedAfterTests, stopChild } from './children.js';
import { eventually, tempDir } from './helpers.js';

export interface RespFixture {
  node: Tessera;
  server: RespServer;
  port: number;
  /** An ioredis client on this server, closed by `stop()`. */
  client(options?: RedisOptions): Promise<Redis>;
  /** A raw socket on this server, closed by `stop()`. */
  raw(): Promise<RawClient>;
  /** Closes every client, the server, the node, and removes the data directory. */
  stop(): Promise<void>;
}

export interface RespFixtureOptions {
  label: string;
  password?: string;
  /** Node options over the defaults (lmdb, 2 workers, 16 fragments). */
  node?: Omit<TesseraOptions, 'dataDir'>;
  /** RESP server options over the defaults. */
  server?: Pick<
    RespServerOptions,
    'keyCountReuseMs' | 'backupDir' | 'tls' | 'slowlogLogSlowerThanUs' | 'slowlogMaxLen' | 'workerPorts'
  >;
}

/** Starts a node and its RESP server on 127.0.0.1, port 0. */
export async function startResp(options: RespFixtureOptions): Promise<RespFixture> {
  const dir = await tempDir(options.label);
  const node = await Tessera.start({
    store: 'lmdb',
    workers: 2,
    fragments: 16,
    ...options.node,
    dataDir: dir.path,
  });
  let server: RespServer;
  try {
    server = await RespServer.listen(node, {
      port: 0,
      bind: '127.0.0.1',
      logger: pino({ level: 'silent' }),
      password: options.password,
      ...options.server,
    });
  } catch (err) {
    // A server that does not start must not leave its node running (the test process would not exit).
    await node.close();
    await dir.cleanup();
    throw err;
  }
  const { port } = server.address;
  const clients: Redis[] = [];
  const raws: RawClient[] = [];
  let stopped: Promise<void> | undefined;
  const stop = (): Promise<void> =>
    (stopped ??= (async () => {
      for (const c of clients) c.disconnect();
      for (const r of raws) r.destroy();
      await server.close();
      await node.close();
      await dir.cleanup();
    })());
  releasedAfterTests(stop);
  return {
    node,
    server,
    port,
    async client(extra?: RedisOptions): Promise<Redis> {
      const redis = newClient(port, extra);
      clients.push(redis);
      await whenReady(redis);
      return redis;
    },
    async raw(): Promise<RawClient> {
      const client = await RawClient.connect(port);
      raws.push(client);
      return client;
    },
    stop,
  };
}

/** An ioredis client that fails instead of retrying or reconnecting, so a test sees every error. */
export function newClient(port: number, extra?: RedisOptions): Redis {
  const redis = new Redis({
    port,
    host: '127.0.0.1',
    lazyConnect: false,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    reconnectOnError: () => false,
    ...extra,
  });
  // Errors surface through the commands; an 'error' event without a listener would crash the test.
  redis.on('error', () => {});
  return redis;
}

/** Resolves once `redis` is ready; rejects if its connection ends first. */
export function whenReady(redis: Redis): Promise<void> {
  if (redis.status === 'ready') return Promise.resolve();
  return new Promise((resolve, reject) => {
    const onReady = () => {
      redis.off('end', onEnd);
      resolve();
    };
    const onEnd = () => {
      redis.off('ready', onReady);
      reject(new Error('the client connection ended before it was ready'));
    };
    redis.once('ready', onReady);
    redis.once('end', onEnd);
  });
}

/** CI sets it: tests that drive Redis's own tools fail instead of skipping when a tool is missing. */
export const REQUIRE_REDIS_TOOLS = process.env.TESSERA_REQUIRE_REDIS_TOOLS === '1';

/** Whether `tool` runs from PATH. */
export function onPath(tool: string): boolean {
  return spawnSync(tool, ['--version'], { stdio: 'ignore' }).error === undefined;
}

/** What to print when redis-server is missing. */
export const REDIS_INSTALL_HINT = 'install redis-server (apt-get install -y redis-server)';

/** Skip reason for tests that compare with redis-server: false when it is there or CI requires it. */
export function redisServerSkip(): string | false {
  return onPath('redis-server') || REQUIRE_REDIS_TOOLS
    ? false
    : `redis-server is not on PATH: ${REDIS_INSTALL_HINT}`;
}

export interface RedisServer {
  port: number;
  /** A raw socket on it, closed by `stop()`. */
  raw(): Promise<RawClient>;
  stop(): Promise<void>;
}

/** A server a test holds to the bytes redis-server sends. */
export interface ComparedServer {
  name: string;
  port: number;
  raw(): Promise<RawClient>;
}

/** Tessera, and redis-server when it is there: the servers that must send the same bytes. */
export function comparedServers(
  fixture: RespFixture,
  redisServer: RedisServer | undefined,
): ComparedServer[] {
  const list: ComparedServer[] = [{ name: 'tessera', port: fixture.port, raw: () => fixture.raw() }];
  if (redisServer !== undefined)
    list.push({ name: 'redis-server', port: redisServer.port, raw: redisServer.raw });
  return list;
}

/** A redis-server without persistence on a free loopback port, in a temporary directory. */
export async function startRedisServer(label: string): Promise<RedisServer> {
  const dir = await tempDir(label);
  const [port] = await freePorts(1);
  const child = killedAfterTests(
    spawn(
      'redis-server',
      ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir.path],
      { stdio: 'ignore' },
    ),
  );
  const raws: RawClient[] = [];
  await eventually(async () => {
    const probe = await RawClient.connect(port).catch(() => undefined);
    probe?.destroy();
    return probe !== undefined;
  });
  return {
    port,
    async raw(): Promise<RawClient> {
      const client = await RawClient.connect(port);
      raws.push(client);
      return client;
    },
    async stop(): Promise<void> {
      for (const r of raws) r.destroy();
      await stopChild(child, 'SIGKILL');
      await dir.cleanup();
    },
  };
}

/** Asserts that `promise` rejects with a Redis error whose text is `expected` (or matches it). */
export async function rejectsWith(promise: Promise<unknown>, expected: string | RegExp): Promise<void> {
  let error: unknown;
  try {
    await promise;
  } catch (err) {
    error = err;
  }
  if (!(error instanceof Error)) assert.fail(`expected the error ${String(expected)}, got a reply`);
  if (typeof expected === 'string') assert.equal(error.message, expected);
  else assert.match(error.message, expected);
}

/** A RESP request as bytes: an array of bulk strings. */
export function encodeCommand(args: ReadonlyArray<string | Uint8Array>): Buffer {
  const parts: Buffer[] = [Buffer.from(`*${args.length}\r\n`)];
  for (const arg of args) {
    const bytes = typeof arg === 'string' ? Buffer.from(arg, 'utf8') : Buffer.from(arg);
    parts.push(Buffer.from(`$${bytes.length}\r\n`), bytes, Buffer.from('\r\n'));
  }
  return Buffer.concat(parts);
}

/**
 * Length of the first complete RESP2/RESP3 reply in `buf` from `at`, or -1 when it is incomplete.
 * Understands every RESP3 type, attributes and pushes included, and holds the framing to the
 * protocol: a malformed reply (a bare LF, a bulk not followed by CRLF, a length that is no integer,
 * an unknown type byte) fails an assertion rather than being skipped.
 */
export function replyLength(buf: Buffer, at = 0): number {
  if (at >= buf.length) return -1;
  const lf = buf.indexOf(0x0a, at);
  if (lf === -1) return -1;
  assert.equal(buf[lf - 1], 0x0d, `a reply line ends in CRLF: ${quote(buf, at, lf + 1)}`);
  const type = String.fromCharCode(buf[at]);
  const header = buf.toString('latin1', at + 1, lf - 1);
  const afterLine = lf + 1 - at;
  switch (type) {
    case '+':
    case '-':
    case ':':
    case '_':
    case ',':
    case '#':
    case '(':
      return afterLine;
    case '$':
    case '!':
    case '=': {
      const n = Number(header);
      assert.ok(Number.isSafeInteger(n), `bulk reply length ${JSON.stringify(header)}`);
      if (n < 0) return afterLine;
      if (buf.length - at < afterLine + n + 2) return -1;
      const bodyEnd = at + afterLine + n;
      assert.ok(buf[bodyEnd] === 0x0d && buf[bodyEnd + 1] === 0x0a, 'a bulk reply ends in CRLF');
      return afterLine + n + 2;
    }
    case '*':
    case '~':
    case '>':
    case '%':
    case '|': {
      const count = Number(header);
      assert.ok(Number.isSafeInteger(count), `aggregate reply count ${JSON.stringify(header)}`);
      if (count < 0) return afterLine;
      const elements = type === '%' || type === '|' ? count * 2 : count;
      let length = afterLine;
      for (let i = 0; i < elements; i++) {
        const n = replyLength(buf, at + length);
        if (n === -1) return -1;
        length += n;
      }
      // An attribute precedes the reply it describes.
      if (type === '|') {
        const n = replyLength(buf, at + length);
        return n === -1 ? -1 : length + n;
      }
      return length;
    }
    default:
      assert.fail(`not a RESP reply type byte at ${at}: ${quote(buf, at, at + 40)}`);
  }
}

function quote(buf: Buffer, start: number, end: number): string {
  return JSON.stringify(buf.toString('latin1', start, Math.min(end, buf.length)));
}

/**
 * Sends each line (arguments split on spaces) to both clients and lists where the replies differ;
 * `repliesOf(args)` says how many replies a line gets (one unless given).
 */
export async function replyDifferences(
  ours: RawClient,
  theirs: RawClient,
  lines: readonly string[],
  repliesOf: (args: string[]) => number = () => 1,
): Promise<string[]> {
  const differences: string[] = [];
  for (const line of lines) {
    const args = line.split(' ');
    ours.sendCommand(...args);
    theirs.sendCommand(...args);
    for (let i = repliesOf(args); i > 0; i--) {
      const a = (await ours.readReply()).toString('latin1');
      const b = (await theirs.readReply()).toString('latin1');
      if (a !== b) differences.push(`${line}: ${JSON.stringify(a)} (redis-server ${JSON.stringify(b)})`);
    }
  }
  return differences;
}

/** A plain TCP client: send bytes, read whole replies as text or bytes. */
export class RawClient {
  /** Received bytes not yet read as replies: `buffered`, then `chunks` not yet joined to it. */
  private buffered: Buffer = Buffer.alloc(0);
  private chunks: Buffer[] = [];
  private chunkBytes = 0;
  /** Bytes received since the connection opened. */
  receivedBytes = 0;
  private waiter: (() => void) | undefined;
  closed = false;
  /** Resolves when the server closes the connection (or it errors). */
  readonly whenClosed: Promise<void>;

  private constructor(readonly socket: Socket) {
    socket.on('data', (chunk: Buffer) => {
      // Joined only when a reply is looked for, so a flood of data costs no repeated copying.
      this.chunks.push(chunk);
      this.chunkBytes += chunk.length;
      this.receivedBytes += chunk.length;
      this.wake();
    });
    this.whenClosed = new Promise((resolve) => {
      socket.on('close', () => {
        this.closed = true;
        this.wake();
        resolve();
      });
    });
    socket.on('error', () => {});
  }

  static connect(port: number): Promise<RawClient> {
    return new Promise((resolve, reject) => {
      const socket = connect(port, '127.0.0.1');
      socket.once('error', reject);
      socket.once('connect', () => {
        socket.off('error', reject);
        socket.setNoDelay(true);
        resolve(new RawClient(socket));
      });
    });
  }

  /** Resolves when the server has closed the connection; rejects if it is still open after `timeoutMs`. */
  async closedWithin(timeoutMs = 5000): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new Error(`the connection is still open after ${timeoutMs} ms`)),
        timeoutMs,
      );
    });
    try {
      await Promise.race([this.whenClosed, timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  send(bytes: Uint8Array | string): void {
    this.socket.write(bytes);
  }

  /** Sends one command as a RESP array. */
  sendCommand(...args: Array<string | Uint8Array>): void {
    this.socket.write(encodeCommand(args));
  }

  /** Sends `args` and reads its reply as latin1 text (exact bytes, one char per byte). */
  async call(...args: Array<string | Uint8Array>): Promise<string> {
    this.sendCommand(...args);
    return (await this.readReply()).toString('latin1');
  }

  /** The next whole reply's bytes; rejects if the connection closes or `timeoutMs` passes first. */
  async readReply(timeoutMs = 5000): Promise<Buffer> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      this.join();
      const n = replyLength(this.buffered);
      if (n !== -1) {
        const reply = this.buffered.subarray(0, n);
        this.buffered = this.buffered.subarray(n);
        return reply;
      }
      if (this.closed) throw new Error('connection closed before a whole reply arrived');
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`no whole reply within ${timeoutMs} ms`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        this.waiter = () => {
          clearTimeout(timer);
          resolve();
        };
      });
    }
  }

  /** Bytes received and not yet read as replies. */
  get pendingBytes(): number {
    return this.buffered.length + this.chunkBytes;
  }

  private join(): void {
    if (this.chunks.length === 0) return;
    this.buffered = Buffer.concat([this.buffered, ...this.chunks]);
    this.chunks = [];
    this.chunkBytes = 0;
  }

  destroy(): void {
    this.socket.destroy();
  }

  private wake(): void {
    const waiter = this.waiter;
    this.waiter = undefined;
    waiter?.();
  }
}
