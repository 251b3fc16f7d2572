// Multi-node tests: real `tessera` processes on 127.0.0.1, each with its own data directory, RESP
// port and peer port, killed with real signals.

import { type ChildProcess, spawn } from 'node:child_process';
import { createServer } from 'node:net';
import { fileURLToPath } from 'node:url';
import type { Redis } from 'ioredis';
import { eventually, tempDir } from './helpers.js';
import { newClient } from './resp-helpers.js';

const MAIN = fileURLToPath(new URL('../../src/main.js', import.meta.url));
export const CLUSTER_SECRET = 'a-cluster-secret-of-at-least-32-bytes!';

/** A free TCP port on loopback (closed again before it is used; good enough on a test machine). */
export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  if (typeof address !== 'object' || address === null) throw new Error('no port');
  return address.port;
}

export class NodeProcess {
  child: ChildProcess | undefined;
  /** Everything the process logged, across restarts. */
  log = '';
  private readonly clients: Redis[] = [];

  constructor(
    readonly id: string,
    readonly respPort: number,
    readonly peerPort: number,
    readonly dataDir: string,
    private readonly args: string[],
  ) {}

  /** Starts the process and resolves once it logs `ready`. */
  async start(): Promise<void> {
    const from = this.log.length;
    const child = spawn(
      process.execPath,
      [MAIN, '--node-id', this.id, '--port', String(this.respPort), '--data-dir', this.dataDir, ...this.args],
      { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, TESSERA_CLUSTER_SECRET: CLUSTER_SECRET } },
    );
    this.child = child;
    child.stdout!.on('data', (chunk: Buffer) => {
      this.log += chunk.toString('utf8');
    });
    child.stderr!.on('data', (chunk: Buffer) => {
      this.log += chunk.toString('utf8');
    });
    const exited = new Promise<never>((_, reject) =>
      child.once('exit', (code) =>
        reject(new Error(`${this.id} exited (${code}) before ready:\n${this.log}`)),
      ),
    );
    await Promise.race([eventually(() => this.log.includes('"msg":"ready"', from), 30_000), exited]);
    exited.catch(() => {});
  }

  /** Sends `signal` and waits for the process to exit. */
  async stop(signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
    const child = this.child;
    this.child = undefined;
    for (const c of this.clients.splice(0)) c.disconnect();
    if (child === undefined || child.exitCode !== null) return;
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    child.kill(signal);
    await exited;
  }

  /** An ioredis client; `readReplica` sends READONLY so reads use this node's own copy. */
  async client(readReplica = false): Promise<Redis> {
    const redis = newClient(this.respPort);
    this.clients.push(redis);
    if (readReplica) await redis.call('READONLY');
    return redis;
  }

  get running(): boolean {
    return this.child !== undefined;
  }
}

export interface ClusterFixture {
  nodes: NodeProcess[];
  /** Resolves once every running node has every other running node connected. */
  connected(): Promise<void>;
  stop(): Promise<void>;
}

/**
 * Starts `ids.length` nodes with each other as peers (plus `phantoms`: members that are listed but
 * never started, for tests that play one). Extra flags go to every node.
 */
export async function startCluster(
  label: string,
  ids: string[],
  extraArgs: string[] = [],
  phantoms: Array<{ id: string; peerPort: number }> = [],
): Promise<ClusterFixture> {
  const dir = await tempDir(label);
  const ports: Array<{ resp: number; peer: number }> = [];
  for (const _ of ids) ports.push({ resp: await freePort(), peer: await freePort() });
  const peers = [
    ...ids.map((id, i) => `${id}@127.0.0.1:${ports[i].peer}`),
    ...phantoms.map((p) => `${p.id}@127.0.0.1:${p.peerPort}`),
  ].join(',');
  const nodes = ids.map(
    (id, i) =>
      new NodeProcess(id, ports[i].resp, ports[i].peer, `${dir.path}/${id}`, [
        '--peers',
        peers,
        '--workers',
        '2',
        '--fragments',
        '16',
        '--log-level',
        'info',
        ...extraArgs,
      ]),
  );
  await Promise.all(nodes.map((n) => n.start()));
  const fixture: ClusterFixture = {
    nodes,
    async connected() {
      const running = nodes.filter((n) => n.running);
      await eventually(async () => {
        for (const n of running) {
          const info = await infoOf(n, 'replication');
          if (Number(info.get('connected_slaves')) < running.length - 1) return false;
        }
        return true;
      }, 20_000);
    },
    async stop() {
      await Promise.all(nodes.map((n) => n.stop('SIGKILL')));
      await dir.cleanup();
    },
  };
  await fixture.connected();
  return fixture;
}

/** INFO `section` of a node as a map of its fields. */
export async function infoOf(node: NodeProcess, section: string): Promise<Map<string, string>> {
  const redis = newClient(node.respPort);
  try {
    const text = (await redis.info(section)) as string;
    const out = new Map<string, string>();
    for (const line of text.split('\r\n')) {
      const colon = line.indexOf(':');
      if (colon > 0) out.set(line.slice(0, colon), line.slice(colon + 1));
    }
    return out;
  } finally {
    redis.disconnect();
  }
}

/** Values of `keys` as this node's own copy holds them (READONLY reads). */
export async function localValues(node: NodeProcess, keys: string[]): Promise<Array<string | null>> {
  const redis = newClient(node.respPort);
  try {
    await redis.call('READONLY');
    const out: Array<string | null> = [];
    for (let i = 0; i < keys.length; i += 500) out.push(...(await redis.mget(...keys.slice(i, i + 500))));
    return out;
  } finally {
    redis.disconnect();
  }
}
