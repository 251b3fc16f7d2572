// Authentication on the RESP face (Redis `requirepass` semantics with the single `default` user):
// what is refused before AUTH, AUTH and HELLO … AUTH, per-connection state, RESET, and the
// behaviour without a password. Also: the server listens on loopback unless told otherwise.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import pino from 'pino';
import { RespServer } from '../../src/main/resp/server.js';
import { RawClient, type RespFixture, rejectsWith, startResp } from './resp-helpers.js';

const PASSWORD = 'sekret-pässword';
const NOAUTH = '-NOAUTH Authentication required.\r\n';
const WRONGPASS = '-WRONGPASS invalid username-password pair or user is disabled.\r\n';
const NO_PASSWORD_CONFIGURED =
  '-ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?\r\n';
const HELLO_NOAUTH =
  '-NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time\r\n';

describe('with a password', () => {
  let fx: RespFixture;

  before(async () => {
    fx = await startResp({ label: 'resp-auth', password: PASSWORD });
  });

  after(async () => {
    await fx.stop();
  });

  test('every command before AUTH answers -NOAUTH Authentication required. and does nothing', async () => {
    const raw = await fx.raw();
    const commands = [
      ['GET', 'auth:k'],
      ['SET', 'auth:k', 'v'],
      ['MSET', 'auth:k', 'v'],
      ['DEL', 'auth:k'],
      ['INCR', 'auth:k'],
      ['EXPIRE', 'auth:k', '10'],
      ['PING'],
      ['ECHO', 'x'],
      ['SELECT', '0'],
      ['CLIENT', 'ID'],
      ['CLIENT', 'SETNAME', 'x'],
      ['INFO'],
      ['CONFIG', 'GET', 'maxmemory'],
      ['COMMAND', 'COUNT'],
      ['DBSIZE'],
      ['SCAN', '0'],
      ['KEYS', '*'],
      ['TIME'],
      ['TESSERA.DURABILITY', 'memory'],
      ['MULTI'],
    ];
    for (const command of commands) assert.equal(await raw.call(...command), NOAUTH, command.join(' '));
    assert.equal(await raw.call('AUTH', PASSWORD), '+OK\r\n');
    assert.equal(await raw.call('GET', 'auth:k'), '$-1\r\n', 'the refused SET wrote nothing');
    assert.equal(await raw.call('CLIENT', 'GETNAME'), '$-1\r\n');
    assert.equal(await raw.call('TESSERA.DURABILITY'), '$5\r\nstore\r\n');
  });

  test('before AUTH an unknown command and a wrong arity are reported first, as Redis does', async () => {
    const raw = await fx.raw();
    assert.equal(
      await raw.call('foo', 'bar'),
      "-ERR unknown command 'foo', with args beginning with: 'bar' \r\n",
    );
    assert.equal(await raw.call('GET'), "-ERR wrong number of arguments for 'get' command\r\n");
  });

  test('HELLO before AUTH answers the HELLO-specific NOAUTH error', async () => {
    const raw = await fx.raw();
    assert.equal(await raw.call('HELLO', '3'), HELLO_NOAUTH);
    assert.equal(await raw.call('HELLO'), HELLO_NOAUTH);
    assert.equal(await raw.call('GET', 'auth:k'), NOAUTH, 'still RESP2 and unauthenticated');
  });

  test('AUTH with a wrong password answers WRONGPASS and the connection stays unauthenticated', async () => {
    const raw = await fx.raw();
    assert.equal(await raw.call('AUTH', 'wrong'), WRONGPASS);
    assert.equal(await raw.call('AUTH', ''), WRONGPASS);
    assert.equal(await raw.call('AUTH', `${PASSWORD}x`), WRONGPASS);
    assert.equal(await raw.call('AUTH', PASSWORD.slice(0, -1)), WRONGPASS);
    assert.equal(await raw.call('AUTH', 'default', 'wrong'), WRONGPASS);
    assert.equal(await raw.call('GET', 'auth:k'), NOAUTH);
  });

  test('AUTH <password> answers OK and commands then work', async () => {
    const raw = await fx.raw();
    assert.equal(await raw.call('AUTH', PASSWORD), '+OK\r\n');
    assert.equal(await raw.call('SET', 'auth:ok', 'v'), '+OK\r\n');
    assert.equal(await raw.call('GET', 'auth:ok'), '$1\r\nv\r\n');
    assert.equal(await raw.call('PING'), '+PONG\r\n');
    assert.equal(await raw.call('AUTH', 'wrong'), WRONGPASS, 'a later wrong AUTH answers WRONGPASS…');
    assert.equal(await raw.call('PING'), '+PONG\r\n', '…and does not log the connection out');
  });

  test('AUTH default <password> authenticates; another user with the right password is refused', async () => {
    const raw = await fx.raw();
    assert.equal(await raw.call('AUTH', 'other', PASSWORD), WRONGPASS);
    assert.equal(await raw.call('PING'), NOAUTH);
    assert.equal(await raw.call('AUTH', 'default', PASSWORD), '+OK\r\n');
    assert.equal(await raw.call('PING'), '+PONG\r\n');
  });

  test('AUTH with too many arguments is a syntax error; with none an arity error', async () => {
    const raw = await fx.raw();
    assert.equal(await raw.call('AUTH', 'default', PASSWORD, 'x'), '-ERR syntax error\r\n');
    assert.equal(await raw.call('AUTH'), "-ERR wrong number of arguments for 'auth' command\r\n");
    assert.equal(await raw.call('PING'), NOAUTH);
  });

  test('HELLO 3 AUTH default <password> authenticates and switches to RESP3 in one step', async () => {
    const raw = await fx.raw();
    assert.equal(await raw.call('HELLO', '3', 'AUTH', 'default', 'wrong'), WRONGPASS);
    assert.equal(await raw.call('HELLO', '3', 'AUTH', 'other', PASSWORD), WRONGPASS);
    assert.equal(await raw.call('GET', 'auth:k'), NOAUTH, 'a failed HELLO changes nothing');
    const hello = await raw.call('HELLO', '3', 'AUTH', 'default', PASSWORD, 'SETNAME', 'hello-auth');
    assert.match(hello, /^%7\r\n.*\$5\r\nproto\r\n:3\r\n/s);
    assert.equal(await raw.call('GET', 'auth:missing'), '_\r\n');
    assert.equal(await raw.call('CLIENT', 'GETNAME'), '$10\r\nhello-auth\r\n');
  });

  test('RESET de-authenticates the connection', async () => {
    const raw = await fx.raw();
    assert.equal(await raw.call('AUTH', PASSWORD), '+OK\r\n');
    assert.equal(await raw.call('PING'), '+PONG\r\n');
    assert.equal(await raw.call('RESET'), '+RESET\r\n', 'RESET needs no authentication');
    assert.equal(await raw.call('PING'), NOAUTH);
    assert.equal(await raw.call('RESET'), '+RESET\r\n');
  });

  test('authentication belongs to one connection', async () => {
    const first = await fx.raw();
    const second = await fx.raw();
    assert.equal(await first.call('AUTH', PASSWORD), '+OK\r\n');
    assert.equal(await second.call('PING'), NOAUTH);
    assert.equal(await first.call('PING'), '+PONG\r\n');
  });

  test('QUIT works before AUTH', async () => {
    const raw = await fx.raw();
    assert.equal(await raw.call('QUIT'), '+OK\r\n');
    await raw.closedWithin();
  });

  test('ioredis with the password (with or without the default username) connects and works', async () => {
    const plain = await fx.client({ password: PASSWORD });
    assert.equal(await plain.set('auth:io', 'v'), 'OK');
    assert.equal(await plain.get('auth:io'), 'v');
    const named = await fx.client({ username: 'default', password: PASSWORD });
    assert.equal(await named.get('auth:io'), 'v');
    const none = await fx.client({ enableReadyCheck: false });
    await rejectsWith(none.get('auth:io'), 'NOAUTH Authentication required.');
  });
});

describe('without a password', () => {
  let fx: RespFixture;
  let server: RespServer;
  let raw: RawClient;

  before(async () => {
    fx = await startResp({ label: 'resp-noauth' });
    // A second server on the same node, started with the defaults: no password, no bind address.
    server = await RespServer.listen(fx.node, { port: 0, logger: pino({ level: 'silent' }) });
    raw = await RawClient.connect(server.address.port);
  });

  after(async () => {
    raw.destroy();
    await server.close();
    await fx.stop();
  });

  test('the server binds 127.0.0.1 by default', () => {
    assert.equal(server.address.host, '127.0.0.1');
    assert.ok(server.address.port > 0);
  });

  test('commands work without AUTH', async () => {
    assert.equal(await raw.call('SET', 'noauth:k', 'v'), '+OK\r\n');
    assert.equal(await raw.call('GET', 'noauth:k'), '$1\r\nv\r\n');
  });

  test('AUTH <password> answers Redis’s "called without any password configured" error', async () => {
    assert.equal(await raw.call('AUTH', 'anything'), NO_PASSWORD_CONFIGURED);
    assert.equal(await raw.call('PING'), '+PONG\r\n', 'the connection still works');
  });

  test('AUTH default <any> and HELLO … AUTH default <any> succeed, as for Redis’s nopass default user', async () => {
    assert.equal(await raw.call('AUTH', 'other', 'anything'), WRONGPASS);
    assert.equal(await raw.call('AUTH', 'default', 'anything'), '+OK\r\n');
    assert.match(await raw.call('HELLO', '2', 'AUTH', 'default', 'anything'), /^\*14\r\n/);
  });

  test('an empty password is refused at start', async () => {
    await assert.rejects(
      RespServer.listen(fx.node, { port: 0, logger: pino({ level: 'silent' }), password: '' }),
      /password must not be empty/,
    );
  });
});
