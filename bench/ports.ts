// Free TCP ports on loopback for servers a harness or test starts as child processes.

import { createServer, type Server } from 'node:net';

/**
 * `count` distinct free ports. All are held open together before any is released, so one call
 * never hands out the same port twice (the kernel reuses a port the moment it is closed). Another
 * process may still take one before it is used: good enough on a test machine.
 */
export async function freePorts(count: number): Promise<number[]> {
  const servers: Server[] = [];
  try {
    for (let i = 0; i < count; i++) {
      const server = createServer();
      servers.push(server);
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        server.listen(0, '127.0.0.1', resolve);
      });
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
