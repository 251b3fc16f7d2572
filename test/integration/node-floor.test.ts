// The floor server (bench/node-floor-server.ts), the baseline bench/node-floor.sh measures Tessera
// against: it must answer SET, GET and PING as Redis does, commands split across any chunk
// boundary and pipelined, or its rates would be a baseline for something else.

import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { killedAfterTests } from './children.js';
import { encodeCommand, RawClient } from './resp-helpers.js';

const FLOOR_SERVER = fileURLToPath(new URL('../../bench/node-floor-server.js', import.meta.url));

describe('node floor server', () => {
  let server: ChildProcess;
  let port = 0;

  before(async () => {
    server = killedAfterTests(
      spawn(process.execPath, [FLOOR_SERVER], { stdio: ['ignore', 'pipe', 'inherit'] }),
    );
    const lines = createInterface({ input: server.stdout! });
    for await (const line of lines) {
      port = (JSON.parse(line) as { port: number }).port;
      break;
    }
    assert.ok(port > 0, 'the floor server printed its port');
  });

  after(() => {
    server.kill('SIGTERM');
  });

  test('answers SET, GET of a present and a missing key, PING and an unknown command as Redis does', async () => {
    const client = await RawClient.connect(port);
    try {
      const value = Buffer.alloc(1234, 0x61);
      assert.equal(await client.call('SET', 'floor:a', value), '+OK\r\n');
      assert.equal(await client.call('GET', 'floor:a'), `$1234\r\n${value.toString('latin1')}\r\n`);
      assert.equal(await client.call('SET', 'floor:empty', ''), '+OK\r\n');
      assert.equal(await client.call('GET', 'floor:empty'), '$0\r\n\r\n');
      assert.equal(await client.call('GET', 'floor:missing'), '$-1\r\n');
      assert.equal(await client.call('PING'), '+PONG\r\n');
      assert.match(await client.call('DEL', 'floor:a'), /^-ERR /);
    } finally {
      client.destroy();
    }
  });

  test('a pipeline sent one byte at a time is answered in order', async () => {
    const client = await RawClient.connect(port);
    try {
      const commands: string[][] = [];
      for (let i = 0; i < 20; i++) commands.push(['SET', `floor:p${i}`, `v${i * 7}`]);
      for (let i = 0; i < 20; i++) commands.push(['GET', `floor:p${i}`]);
      const bytes = Buffer.concat(commands.map((c) => encodeCommand(c)));
      for (const byte of bytes) {
        client.send(Buffer.of(byte));
        await new Promise((resolve) => setImmediate(resolve));
      }
      for (let i = 0; i < 20; i++) assert.equal((await client.readReply()).toString('latin1'), '+OK\r\n');
      for (let i = 0; i < 20; i++) {
        const v = `v${i * 7}`;
        assert.equal((await client.readReply()).toString('latin1'), `$${v.length}\r\n${v}\r\n`);
      }
    } finally {
      client.destroy();
    }
  });

  test('a request that is not RESP closes the connection', async () => {
    const client = await RawClient.connect(port);
    client.send('hello\r\n');
    await client.closedWithin();
  });
});
