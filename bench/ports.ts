// Free TCP ports on loopback for servers a harness or test starts as child processes.

import { readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';

/** The lowest port handed out: below it are the well-known and registered ports services use. */
const PORT_MIN = 10_000;
/** Picks tried before giving up on the range below the ephemeral ports. */
const PICKS_MAX = 200;

/**
 * `count` distinct free ports. All are held open together before any is released, so one call
 * never hands out the same port twice (the kernel reuses a port the moment it is closed).
 *
 * Where the kernel says which ports it hands to outgoing connections (Linux), they come from below
 * that range: a node started first dials its peers before the later ones listen, and each such
 * connection takes an ephemeral local port, which could be one handed out here for a later node.
 * Another process may still take one before it is used: good enough on a test machine.
 */
export async function freePorts(count: number): Promise<number[]> {
  const servers: Server[] = [];
  try {
    const below = ephemeralLow();
    for (let picks = 0; below !== undefined && servers.length < count && picks < PICKS_MAX; picks++) {
      const port = PORT_MIN + Math.floor(Math.random() * (below - PORT_MIN));
      const server = await listening(port);
      if (server !== undefined) servers.push(server);
    }
    while (servers.length < count) {
      const server = await listening(0);
      if (server === undefined) throw new Error('no free port');
      servers.push(server);
    }
    return servers.map((server) => {
      const address = server.address();
      if (typeof address !== 'object' || address === null) throw new Error('no free port');
      return address.port;
    });
  } finally {
    await Promise.all(servers.map((s) => new Promise<void>((resolve) => s.close(() => resolve()))));
  }
}

/** A server listening on `port` (0: any) on loopback, or undefined when the port is taken. */
async function listening(port: number): Promise<Server | undefined> {
  const server = createServer();
  const listened = await new Promise<boolean>((resolve) => {
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => resolve(true));
  });
  return listened ? server : undefined;
}

/** The first port of the kernel's ephemeral range, when it leaves room below it; else undefined. */
function ephemeralLow(): number | undefined {
  try {
    const low = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
    return Number.isInteger(low) && low > PORT_MIN + 1_000 ? low : undefined;
  } catch {
    return undefined;
  }
}
