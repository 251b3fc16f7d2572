// Binding a listener (RESP, TLS, admin HTTP, peer mesh, membership datagrams): resolves with the address it got (port 0
// picks a free one), rejects with the bind error (EADDRINUSE, EACCES…) instead of emitting it.

import type { Socket as DgramSocket } from 'node:dgram';
import type { Server } from 'node:net';

export function listenOn(
  server: Server,
  port: number,
  host: string,
): Promise<{ host: string; port: number }> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      const address = server.address();
      resolve(
        typeof address === 'object' && address !== null
          ? { host: address.address, port: address.port }
          : { host, port },
      );
    });
  });
}

/** Binds a UDP socket (membership datagrams on the peer port), rejecting with the bind error. */
export function bindDatagrams(socket: DgramSocket, port: number, host: string): Promise<void> {
  return new Promise((resolve, reject) => {
    socket.once('error', reject);
    socket.bind(port, host, () => {
      socket.off('error', reject);
      resolve();
    });
  });
}
