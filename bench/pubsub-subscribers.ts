// Subscribers for the Pub/Sub benchmark: opens N connections to a RESP server on 127.0.0.1, each
// SUBSCRIBEd to one channel, reads and counts what arrives, and on SIGTERM prints how many messages
// of the expected size reached them (JSON on stdout). Prints `ready` once every subscription is
// confirmed.
//
//   node .build/bench/pubsub-subscribers.js PORT N CHANNEL MESSAGE_BYTES

import { connect, type Socket } from 'node:net';

const [port, count, channel, messageBytes] = [
  Number(process.argv[2]),
  Number(process.argv[3]),
  process.argv[4] ?? 'bench',
  Number(process.argv[5] ?? 100),
];
const confirmation = `*3\r\n$9\r\nsubscribe\r\n$${channel.length}\r\n${channel}\r\n:1\r\n`.length;
const perMessage =
  `*3\r\n$7\r\nmessage\r\n$${channel.length}\r\n${channel}\r\n$${messageBytes}\r\n`.length + messageBytes + 2;

const sockets: Socket[] = [];
let bytes = 0;
let confirmed = 0;
for (let i = 0; i < count; i++) {
  const socket = connect(port, '127.0.0.1');
  let first = true;
  socket.on('data', (chunk: Buffer) => {
    bytes += chunk.length;
    if (first) {
      first = false;
      if (++confirmed === count) console.log('ready');
    }
  });
  socket.on('error', (err) => {
    console.error(`subscriber ${i}: ${err.message}`);
    process.exit(1);
  });
  socket.write(`*2\r\n$9\r\nSUBSCRIBE\r\n$${channel.length}\r\n${channel}\r\n`);
  sockets.push(socket);
}
if (count === 0) console.log('ready');
// Stay up until told to report, subscribers or not.
const keepAlive = setInterval(() => {}, 60_000);

process.on('SIGTERM', () => {
  console.log(JSON.stringify({ messages: (bytes - confirmation * count) / perMessage }));
  for (const s of sockets) s.destroy();
  clearInterval(keepAlive);
  process.exit(0);
});
