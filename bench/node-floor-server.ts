// The least a Node.js server does to answer SET and GET over RESP: one `data` handler per socket,
// commands parsed in place, values kept in a `Map` in memory, each chunk's replies gathered into
// one socket write. No storage, no threads, no versions, no limits, no other commands: it is a
// baseline, not a server. `bench/node-floor.sh` measures it beside redis-server and Tessera, to
// show what the runtime itself costs on a machine (Node's event loop, streams and system calls)
// and how far Tessera stands from it.
//
//   node .build/bench/node-floor-server.js [port]      (default 0: any free port)
//
// Prints `{"msg":"ready","port":N}` once listening. Anything it cannot parse closes the socket.

import { createServer, type Socket } from 'node:net';

/** Reply bytes gathered before they are written out mid-chunk (a long pipeline of large GETs). */
const FLOOR_REPLY_BYTES_MAX = 1 << 20;
/** Room kept in the reply buffer for one reply's header and trailer. */
const FLOOR_REPLY_HEADER_BYTES = 32;
const CR = 13;
const LF = 10;
const LOWER = 0x20;
const LETTER_S = 0x73;
const LETTER_G = 0x67;

const OK = Buffer.from('+OK\r\n');
const NIL = Buffer.from('$-1\r\n');
const PONG = Buffer.from('+PONG\r\n');
const UNKNOWN = Buffer.from('-ERR the floor server knows SET, GET and PING\r\n');

const values = new Map<string, Buffer>();
const replies = Buffer.allocUnsafe(FLOOR_REPLY_BYTES_MAX);

/** A decimal at b[p, end), as RESP writes lengths; -1 when it is not one. */
function decimal(b: Buffer, p: number, end: number): number {
  if (p === end) return -1;
  let n = 0;
  for (; p < end; p++) {
    const d = b[p] - 48;
    if (d < 0 || d > 9) return -1;
    n = n * 10 + d;
  }
  return n;
}

/** Writes `$<length>\r\n` into the replies at `at`; returns where it ends. */
function bulkHeader(length: number, at: number): number {
  replies[at++] = 0x24;
  const digits = length === 0 ? 1 : Math.floor(Math.log10(length)) + 1;
  for (let i = digits - 1, n = length; i >= 0; i--, n = Math.floor(n / 10)) replies[at + i] = 48 + (n % 10);
  at += digits;
  replies[at++] = CR;
  replies[at++] = LF;
  return at;
}

function serve(socket: Socket): void {
  socket.setNoDelay(true);
  let held: Buffer | null = null;
  socket.on('error', () => socket.destroy());
  socket.on('data', (chunk: Buffer) => {
    const b = held === null ? chunk : Buffer.concat([held, chunk]);
    held = null;
    let out = 0;
    let p = 0;
    while (p < b.length) {
      const start = p;
      let eol = b.indexOf(CR, p);
      if (eol < 0) break;
      const argc = b[p] === 0x2a ? decimal(b, p + 1, eol) : -1;
      if (argc < 1) {
        socket.destroy();
        return;
      }
      p = eol + 2;
      let op = 0;
      let keyAt = 0;
      let keyEnd = 0;
      let valueAt = 0;
      let valueEnd = 0;
      let complete = true;
      for (let i = 0; i < argc; i++) {
        eol = b.indexOf(CR, p);
        if (eol < 0) {
          complete = false;
          break;
        }
        const length = b[p] === 0x24 ? decimal(b, p + 1, eol) : -1;
        if (length < 0) {
          socket.destroy();
          return;
        }
        p = eol + 2;
        if (p + length + 2 > b.length) {
          complete = false;
          break;
        }
        if (i === 0) op = b[p] | LOWER;
        else if (i === 1) {
          keyAt = p;
          keyEnd = p + length;
        } else {
          valueAt = p;
          valueEnd = p + length;
        }
        p += length + 2;
      }
      if (!complete) {
        p = start;
        break;
      }
      const key = b.toString('latin1', keyAt, keyEnd);
      const value = op === LETTER_G ? values.get(key) : undefined;
      if (out + FLOOR_REPLY_HEADER_BYTES + (value?.length ?? 0) > FLOOR_REPLY_BYTES_MAX) {
        socket.write(Buffer.from(replies.subarray(0, out)));
        out = 0;
      }
      if (op === LETTER_S && argc === 3) {
        values.set(key, Buffer.from(b.subarray(valueAt, valueEnd)));
        out += OK.copy(replies, out);
      } else if (op === LETTER_G && argc === 2) {
        if (value === undefined) out += NIL.copy(replies, out);
        else {
          out = bulkHeader(value.length, out);
          out += value.copy(replies, out);
          replies[out++] = CR;
          replies[out++] = LF;
        }
      } else if (argc === 1) out += PONG.copy(replies, out);
      else out += UNKNOWN.copy(replies, out);
    }
    if (p < b.length) held = Buffer.from(b.subarray(p));
    if (out > 0) socket.write(Buffer.from(replies.subarray(0, out)));
  });
}

const server = createServer(serve);
server.listen(Number(process.argv[2] ?? 0), '127.0.0.1', () => {
  const address = server.address();
  const port = typeof address === 'object' && address !== null ? address.port : 0;
  console.log(JSON.stringify({ msg: 'ready', port }));
});
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, () => process.exit(0));
