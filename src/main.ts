#!/usr/bin/env node
// The `tessera` command: starts a node from flags and environment, logs readiness as JSON, and shuts
// down gracefully on SIGINT / SIGTERM; `tessera status`, `tessera placement` and `tessera cluster …`
// (main/cluster-cli.ts) ask a running node through its admin port.

import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import pino from 'pino';
import { ErrorKind, TesseraError } from './core/errors.js';
import { ADMIN_REQUEST_TIMEOUT_MS, AdminServer } from './main/admin/server.js';
import { type CliArgs, checkAdminExposure, helpText, inFlagTerms, parseCliArgs } from './main/cli-args.js';
import { adminBaseUrl, clusterCommand } from './main/cluster-cli.js';
import type { TesseraOptions } from './main/config.js';
import {
  describePeersDown,
  type HealthState,
  type PeerDown,
  peerSummaries,
  workerSummaries,
} from './main/health-summary.js';
import { listenOn } from './main/listen.js';
import { type FragmentPlacement, type Health, Tessera } from './main/node.js';
import { RespServer } from './main/resp/server.js';

/** The package version, from the package.json above this file (dist/ or a test build). */
function version(): string {
  for (const path of ['../package.json', '../../package.json']) {
    try {
      const pkg = JSON.parse(readFileSync(new URL(path, import.meta.url), 'utf8')) as {
        name?: string;
        version?: string;
      };
      if (pkg.name === 'tessera-db' && pkg.version !== undefined) return pkg.version;
    } catch {
      // not at this level
    }
  }
  return 'unknown';
}

/**
 * Binds each client port once and lets it go, so a start that would fail on a port in use fails
 * before it creates or takes a data directory; undefined when all bind. (Another process can still
 * take one in between: the listeners' own errors then stop the start, as before.)
 */
async function firstUnboundPort(args: CliArgs): Promise<string | undefined> {
  const wanted: Array<{ flag: string; port: number; host: string }> = [];
  // A TLS-only node has no plain listener.
  if (args.tls?.only !== true) wanted.push({ flag: '--port', port: args.resp.port, host: args.resp.bind });
  if (args.tls !== undefined) wanted.push({ flag: '--tls-port', port: args.tls.port, host: args.resp.bind });
  if (args.admin !== undefined)
    wanted.push({ flag: '--admin-port', port: args.admin.port, host: args.admin.bind });
  for (const { flag, port, host } of wanted) {
    if (port === 0) continue;
    const server = createServer();
    try {
      await listenOn(server, port, host);
    } catch (err) {
      return `${flag} ${port} cannot be bound on ${host}: ${(err as Error).message}`;
    } finally {
      if (server.listening) await new Promise((resolve) => server.close(resolve));
    }
  }
  return undefined;
}

async function main(): Promise<number> {
  const [first, ...rest] = process.argv.slice(2);
  if (first === 'status' || first === 'placement') return askNode(first, rest);
  if (first === 'cluster') return clusterCommand(rest);
  let args: ReturnType<typeof parseCliArgs>;
  try {
    args = parseCliArgs(process.argv.slice(2), process.env);
    if (args.admin !== undefined) checkAdminExposure(args.admin);
  } catch (err) {
    process.stderr.write(`tessera: ${(err as Error).message}\n`);
    return 2;
  }
  if (args.help) {
    process.stdout.write(`${helpText()}\n`);
    return 0;
  }
  if (args.version) {
    process.stdout.write(`${version()}\n`);
    return 0;
  }
  let peerTls: TesseraOptions['peerTls'];
  try {
    peerTls = readPeerTls(args.peerTls);
  } catch (err) {
    process.stderr.write(`tessera: ${(err as Error).message}\n`);
    return 2;
  }
  const portInUse = await firstUnboundPort(args);
  if (portInUse !== undefined) {
    process.stderr.write(`tessera: ${portInUse}\n`);
    return 2;
  }
  const logger = pino({ level: args.logLevel, base: { pid: process.pid } });
  let node: Tessera;
  try {
    node = await Tessera.start({ ...args.options, peerTls, logger });
  } catch (err) {
    const code = err instanceof TesseraError ? err.code : undefined;
    if (err instanceof TesseraError && err.kind === ErrorKind.InvalidInput) {
      // Bad input: one plain line naming the flag as the user gave it, as a parse error is.
      process.stderr.write(`tessera: ${inFlagTerms(err.message, args.fromEnvironment)}\n`);
      return 2;
    }
    logger.fatal({ code, err: (err as Error).message }, 'node failed to start');
    return 1;
  }
  let stop: (reason: string, now?: boolean) => void = () => {};
  let resp: RespServer;
  try {
    const tls = args.tls;
    resp = await RespServer.listen(node, {
      ...args.resp,
      logger,
      version: version(),
      onShutdown: ({ now }) => stop('SHUTDOWN', now),
      tls:
        tls === undefined
          ? undefined
          : {
              port: tls.port,
              cert: readFileSync(tls.certFile),
              key: readFileSync(tls.keyFile),
              ca: tls.caFile === undefined ? undefined : readFileSync(tls.caFile),
              authClients: tls.authClients,
              only: tls.only,
            },
    });
  } catch (err) {
    logger.fatal(
      { err: (err as Error).message, port: args.resp.port, tlsPort: args.tls?.port, bind: args.resp.bind },
      'RESP port failed to open',
    );
    await node.close();
    return 1;
  }
  let admin: AdminServer | undefined;
  if (args.admin !== undefined) {
    try {
      admin = await AdminServer.listen(node, { ...args.admin, logger, resp });
    } catch (err) {
      logger.fatal({ err: (err as Error).message, ...args.admin }, 'admin port failed to open');
      await resp.close();
      await node.close();
      return 1;
    }
  }
  const { host, port } = resp.address;
  logger.info(
    {
      nodeId: node.nodeId,
      version: version(),
      host,
      port,
      tlsPort: resp.tlsAddress?.port,
      adminPort: admin?.address.port,
      auth: resp.requiresAuth,
    },
    'ready',
  );
  return new Promise<number>((resolve) => {
    let stopping = false;
    /** On SIGINT / SIGTERM, or the SHUTDOWN command (`now`: without waiting for replicas). */
    stop = (reason: string, now = false) => {
      if (stopping) return;
      stopping = true;
      logger.info({ reason }, 'shutting down');
      const drain = node.cluster !== undefined && args.drainTimeoutMs > 0 && !now;
      Promise.all([resp.close(), admin?.close()])
        .then(() => node.close(drain ? { drainReplication: { timeoutMs: args.drainTimeoutMs } } : {}))
        .then(
          () => resolve(0),
          (err: Error) => {
            logger.error({ err: err.message }, 'shutdown failed');
            resolve(1);
          },
        );
    };
    process.on('SIGINT', () => stop('SIGINT'));
    process.on('SIGTERM', () => stop('SIGTERM'));
    // A graceful leave ends with the node Removed: it has nothing left to serve.
    node.cluster?.left.then(() => stop('left the cluster'));
  });
}

/** The peer mesh's PEM files, read before the node starts; an unreadable one names its flag. */
function readPeerTls(files: CliArgs['peerTls']): TesseraOptions['peerTls'] {
  if (files === undefined) return undefined;
  const read = (flag: string, path: string | undefined): Buffer | undefined => {
    if (path === undefined) return undefined;
    try {
      return readFileSync(path);
    } catch (err) {
      throw new Error(`--${flag}: ${(err as Error).message}`);
    }
  };
  return {
    cert: read('tls-cert-file', files.certFile)!,
    key: read('tls-key-file', files.keyFile)!,
    ca: read('tls-ca-cert-file', files.caFile)!,
    clientCert: read('tls-client-cert-file', files.clientCertFile),
    clientKey: read('tls-client-key-file', files.clientKeyFile),
  };
}

/**
 * `tessera status` / `tessera placement`: reads the node's /health or /placement and prints it for
 * a person. Exit 0 when healthy (status) or answered (placement), 1 when not (degraded included),
 * 2 for bad flags.
 */
async function askNode(what: 'status' | 'placement', argv: string[]): Promise<number> {
  const base = adminBaseUrl(what, argv);
  if (base === undefined) return 2;
  const url = `${base}/${what === 'status' ? 'health' : 'placement'}`;
  let response: Response;
  try {
    response = await fetch(url, { signal: AbortSignal.timeout(ADMIN_REQUEST_TIMEOUT_MS) });
  } catch (err) {
    process.stderr.write(`tessera ${what}: cannot reach ${url}: ${(err as Error).message}\n`);
    return 1;
  }
  const body = (await response.json()) as Record<string, unknown>;
  if (what === 'placement') {
    if (!response.ok) {
      process.stderr.write(`tessera placement: ${url} answered ${response.status}\n`);
      return 1;
    }
    process.stdout.write(`${formatPlacement(body as unknown as FragmentPlacement[])}\n`);
    return 0;
  }
  process.stdout.write(`${formatStatus(body)}\n`);
  // A degraded node answers 200 (it serves); the operator asking still hears it as not well.
  return response.status === 200 && body.state === 'healthy' ? 0 : 1;
}

const STATE_WORDS: Record<HealthState, string> = {
  healthy: 'healthy',
  degraded: 'DEGRADED',
  unhealthy: 'NOT HEALTHY',
};

function formatStatus(body: Record<string, unknown>): string {
  if (typeof body.error === 'string') return `not healthy: ${body.error}`;
  const health = body as unknown as Health & { state: HealthState; peersDown: PeerDown[] };
  const lines = [
    `node ${health.nodeId}: ${STATE_WORDS[health.state]} (store ${health.store}, durability ${health.durability}, ${health.fragmentCount} fragments)`,
  ];
  if (health.peersDown.length > 0) {
    lines.push(`  ${describePeersDown(health.peersDown)} (cluster state ${health.cluster?.state})`);
  }
  for (const w of workerSummaries(health)) {
    lines.push(
      `  worker ${w.index}: ${w.state}, ${w.restarts} restarts, ${w.fragments} fragments, ` +
        `${w.queued[0] + w.queued[1] + w.queued[2]} queued` +
        (w.commitFailures > 0 ? `, ${w.commitFailures} commits failed in a row` : ''),
    );
  }
  for (const p of health.cluster === undefined ? [] : peerSummaries(health.cluster)) {
    lines.push(
      `  peer ${p.id}: ${p.connected ? 'connected' : 'DISCONNECTED'}, backlog ${p.backlog}, lag ${p.lagMs} ms`,
    );
  }
  return lines.join('\n');
}

function formatPlacement(fragments: FragmentPlacement[]): string {
  const rows = fragments.map(
    (f) =>
      `${String(f.fragment).padStart(8)}  ${`${f.slots[0]}-${f.slots[1]}`.padEnd(11)}  ` +
      `${(f.serving ?? '(none reachable)').padEnd(20)}  ${f.replicas.join(',')}${f.local ? '' : '  (not here)'}`,
  );
  return [`fragment  slots        serving               replicas`, ...rows].join('\n');
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (err: unknown) => {
    process.stderr.write(`tessera: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exitCode = 1;
  },
);
