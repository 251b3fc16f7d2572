// The Redis protocol over TLS (--tls-port): certificates checked as --tls-auth-clients says, the
// plain port unchanged beside it, and clients that cannot finish a handshake turned away alone.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import { connect as connectTls } from 'node:tls';
import { fileURLToPath } from 'node:url';
import type { Redis } from 'ioredis';
import type { TlsAuthClients } from '../../src/main/resp/server.js';
import { newClient, onPath, REQUIRE_REDIS_TOOLS, type RespFixture, startResp } from './resp-helpers.js';

const FIXTURES = fileURLToPath(new URL('../../../test/fixtures/tls/', import.meta.url));
const pem = (name: string) => readFileSync(`${FIXTURES}${name}`);

/** Runs a command to its end, whatever its exit status; its output as text. */
function run(file: string, args: string[]): Promise<{ stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(file, args, { timeout: 10_000 }, (_err, stdout, stderr) => resolve({ stdout, stderr }));
  });
}
const CA = pem('ca.crt');
const CLIENT = { cert: pem('client.crt'), key: pem('client.key') };

async function startTls(authClients: TlsAuthClients): Promise<RespFixture> {
  return startResp({
    label: `resp-tls-${authClients}`,
    server: { tls: { port: 0, cert: pem('server.crt'), key: pem('server.key'), ca: CA, authClients } },
  });
}

/** An ioredis client over TLS that fails instead of retrying. */
function tlsClient(port: number, withCert: boolean): Redis {
  return newClient(port, { tls: { ca: CA, servername: 'localhost', ...(withCert ? CLIENT : {}) } });
}

/** Resolves when a TLS handshake completes, rejects when the server refuses it. */
function handshake(port: number, withCert: boolean): Promise<void> {
  return new Promise((resolve, reject) => {
    const socket = connectTls({
      port,
      host: '127.0.0.1',
      ca: CA,
      servername: 'localhost',
      ...(withCert ? CLIENT : {}),
    });
    socket.once('secureConnect', () => {
      // TLS 1.3 reports a refused client certificate after the handshake: wait for a reply.
      socket.write('*1\r\n$4\r\nPING\r\n');
    });
    socket.once('data', (data) => {
      socket.destroy();
      if (data.toString() === '+PONG\r\n') resolve();
      else reject(new Error(`unexpected reply ${JSON.stringify(data.toString())}`));
    });
    socket.once('error', (err) => {
      socket.destroy();
      reject(err);
    });
    // A refused handshake may end in a bare close; after a resolve this rejection is ignored.
    socket.once('close', () => reject(new Error('the server closed the connection')));
  });
}

describe('TLS with client certificates required (yes)', () => {
  let fixture: RespFixture;
  before(async () => {
    fixture = await startTls('yes');
  });
  after(async () => {
    await fixture.stop();
  });

  test('a client with a certificate from the CA reads and writes; the plain port works as before', async () => {
    const tlsPort = fixture.server.tlsAddress!.port;
    assert.notEqual(tlsPort, fixture.port);
    const secure = tlsClient(tlsPort, true);
    try {
      assert.equal(await secure.set('tls:k', 'v'), 'OK');
      assert.equal(await secure.get('tls:k'), 'v');
    } finally {
      secure.disconnect();
    }
    const plain = await fixture.client();
    assert.equal(await plain.get('tls:k'), 'v');
    assert.deepEqual(await plain.config('GET', 'tls-port'), ['tls-port', String(tlsPort)]);
  });

  test('a client without a certificate, or speaking plain RESP to the TLS port, is turned away', async () => {
    const tlsPort = fixture.server.tlsAddress!.port;
    await assert.rejects(handshake(tlsPort, false));
    await handshake(tlsPort, true);
    const plainToTls = newClient(tlsPort);
    try {
      await assert.rejects(plainToTls.ping());
    } finally {
      plainToTls.disconnect();
    }
    // The server goes on serving.
    assert.equal(await (await fixture.client()).ping(), 'PONG');
  });

  test('redis-cli --tls with the client certificate', {
    skip: !onPath('redis-cli') && !REQUIRE_REDIS_TOOLS,
  }, async () => {
    // Asynchronously: the server runs in this process, and a synchronous spawn would stall it.
    const tlsPort = String(fixture.server.tlsAddress!.port);
    const args = ['--tls', '--cacert', `${FIXTURES}ca.crt`, '-p', tlsPort];
    const ok = await run('redis-cli', [
      ...args,
      '--cert',
      `${FIXTURES}client.crt`,
      '--key',
      `${FIXTURES}client.key`,
      'PING',
    ]);
    assert.equal(ok.stdout.trim(), 'PONG', ok.stderr);
    const refused = await run('redis-cli', [...args, 'PING']);
    assert.notEqual(refused.stdout.trim(), 'PONG');
  });
});

describe('TLS with optional and with no client certificates', () => {
  for (const authClients of ['optional', 'no'] as const) {
    test(`${authClients}: clients with and without a certificate are served`, async () => {
      const fixture = await startTls(authClients);
      try {
        const tlsPort = fixture.server.tlsAddress!.port;
        await handshake(tlsPort, false);
        await handshake(tlsPort, true);
      } finally {
        await fixture.stop();
      }
    });
  }
});

test('--tls-only: no plain port at all; CONFIG GET port answers 0, as Redis with port 0', async () => {
  const fixture = await startResp({
    label: 'resp-tls-only',
    server: {
      tls: {
        port: 0,
        cert: pem('server.crt'),
        key: pem('server.key'),
        ca: CA,
        authClients: 'yes',
        only: true,
      },
    },
  });
  try {
    assert.equal(fixture.server.address.port, 0);
    const secure = tlsClient(fixture.server.tlsAddress!.port, true);
    try {
      assert.deepEqual(await secure.config('GET', 'port'), ['port', '0']);
      assert.equal(await secure.set('tls-only:k', 'v'), 'OK');
    } finally {
      secure.disconnect();
    }
  } finally {
    await fixture.stop();
  }
});

test('client authentication without CA certificates is refused at start', async () => {
  await assert.rejects(
    startResp({
      label: 'resp-tls-no-ca',
      server: { tls: { port: 0, cert: pem('server.crt'), key: pem('server.key'), authClients: 'yes' } },
    }),
    /needs the CA certificates/,
  );
});
