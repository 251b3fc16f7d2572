#!/usr/bin/env node
// The `tessera` command: starts a node from flags and environment, logs readiness as JSON, and shuts
// down gracefully on SIGINT / SIGTERM.

import { readFileSync } from 'node:fs';
import pino from 'pino';
import { TesseraError } from './core/errors.js';
import { helpText, parseCliArgs } from './main/cli-args.js';
import { Tessera } from './main/node.js';
import { RespServer } from './main/resp/server.js';

/** The package version, from the package.json above this file (dist/ or a test build). */
function version(): string {
  for (const path of ['../package.json', '../../package.json']) {
    try {
      const pkg = JSON.parse(readFileSync(new URL(path, import.meta.url), 'utf8')) as {
        name?: string;
        version?: string;
      };
      if (pkg.name === 'tessera' && pkg.version !== undefined) return pkg.version;
    } catch {
      // not at this level
    }
  }
  return 'unknown';
}

async function main(): Promise<number> {
  let args: ReturnType<typeof parseCliArgs>;
  try {
    args = parseCliArgs(process.argv.slice(2), process.env);
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
  const logger = pino({ level: args.logLevel, base: { pid: process.pid } });
  let node: Tessera;
  try {
    node = await Tessera.start({ ...args.options, logger });
  } catch (err) {
    const code = err instanceof TesseraError ? err.code : undefined;
    logger.fatal({ code, err: (err as Error).message }, 'node failed to start');
    return 1;
  }
  let stop: (reason: string, now?: boolean) => void = () => {};
  let resp: RespServer;
  try {
    resp = await RespServer.listen(node, {
      ...args.resp,
      logger,
      version: version(),
      onShutdown: ({ now }) => stop('SHUTDOWN', now),
    });
  } catch (err) {
    logger.fatal(
      { err: (err as Error).message, port: args.resp.port, bind: args.resp.bind },
      'RESP port failed to open',
    );
    await node.close();
    return 1;
  }
  const { host, port } = resp.address;
  logger.info({ nodeId: node.nodeId, version: version(), host, port, auth: resp.requiresAuth }, 'ready');
  return new Promise<number>((resolve) => {
    let stopping = false;
    /** On SIGINT / SIGTERM, or the SHUTDOWN command (`now`: without waiting for replicas). */
    stop = (reason: string, now = false) => {
      if (stopping) return;
      stopping = true;
      logger.info({ reason }, 'shutting down');
      const drain = node.cluster !== undefined && args.drainTimeoutMs > 0 && !now;
      resp
        .close()
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
  });
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
