// Command-line flags and their environment variables (DESIGN.md "Faces: CLI").
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  checkAdminExposure,
  envName,
  helpText,
  parseCliArgs,
  parseDuration,
  parseSize,
} from '../../src/main/cli-args.js';

test('durations accept ms, s, m, h and bare milliseconds', () => {
  assert.equal(parseDuration('250ms'), 250);
  assert.equal(parseDuration('2s'), 2000);
  assert.equal(parseDuration('5m'), 300_000);
  assert.equal(parseDuration('1h'), 3_600_000);
  assert.equal(parseDuration('42'), 42);
  assert.throws(() => parseDuration('2 weeks'), /not a duration/);
  assert.throws(() => parseDuration('-5s'), /not a duration/);
});

test('sizes accept b, kb, mb, gb and bare bytes', () => {
  assert.equal(parseSize('64kb'), 65_536);
  assert.equal(parseSize('4MB'), 4 * 1024 * 1024);
  assert.equal(parseSize('100'), 100);
  assert.throws(() => parseSize('lots'), /not a size/);
});

test('flags map onto node options', () => {
  const args = parseCliArgs(
    [
      '--fragments',
      '32',
      '--workers=3',
      '--data-dir',
      '/tmp/x',
      '--store',
      'level',
      '--durability',
      'stable',
    ],
    {},
  );
  assert.deepEqual(args.options, {
    fragments: 32,
    workers: 3,
    dataDir: '/tmp/x',
    store: 'level',
    durability: 'stable',
  });
  const more = parseCliArgs(
    [
      '--flush-interval',
      '250ms',
      '--value-bytes-max',
      '1mb',
      '--max-memory',
      '2gb',
      '--max-memory-policy',
      'allkeys-lru',
      '--log-level',
      'warn',
      '--move-rate',
      '64kb',
      '--anti-entropy-rate',
      '5000',
      '--wal-segment-size',
      '1mb',
    ],
    {},
  );
  assert.deepEqual(more.options, {
    flushIntervalMs: 250,
    valueBytesMax: 1024 * 1024,
    maxMemoryBytes: 2 * 1024 ** 3,
    maxMemoryPolicy: 'allkeys-lru',
    moveRateBytesPerSec: 64 * 1024,
    antiEntropyKeysPerSec: 5000,
    walSegmentBytes: 1024 * 1024,
  });
  assert.equal(more.logLevel, 'warn');
});

test('every flag reads its environment variable; the command line wins', () => {
  assert.equal(envName('peer-port'), 'TESSERA_PEER_PORT');
  const args = parseCliArgs(['--workers', '2'], {
    TESSERA_WORKERS: '5',
    TESSERA_STORE: 'memory',
    TESSERA_CLEAN_INTERVAL: '5s',
    TESSERA_CLEAN_KEYS_PER_SEC: '20000',
  });
  assert.deepEqual(args.options, {
    workers: 2,
    store: 'memory',
    cleanIntervalMs: 5000,
    cleanKeysPerSec: 20000,
  });
});

test('bad flags are refused with a message naming them', () => {
  assert.throws(() => parseCliArgs(['--fragmnets', '4'], {}), /unknown flag --fragmnets/);
  assert.throws(() => parseCliArgs(['--workers'], {}), /--workers needs a value/);
  assert.throws(() => parseCliArgs(['--workers', 'two'], {}), /--workers: "two" is not an integer/);
  assert.throws(() => parseCliArgs(['stray'], {}), /unexpected argument "stray"/);
  assert.throws(() => parseCliArgs(['--log-level', 'loud'], {}), /--log-level must be one of/);
  assert.throws(() => parseCliArgs([], { TESSERA_FLUSH_INTERVAL: 'soon' }), /--flush-interval/);
});

test('--help documents every flag with its environment variable', () => {
  const help = helpText();
  for (const flag of [
    'data-dir',
    'store',
    'fragments',
    'workers',
    'durability',
    'node-id',
    'clean-interval',
  ]) {
    assert.match(help, new RegExp(`--${flag}`));
    assert.match(help, new RegExp(envName(flag)));
  }
  assert.equal(parseCliArgs(['--help'], {}).help, true);
});

test('--tls-cluster: the peer mesh over TLS, with the certificate files and without a TLS port', () => {
  const peers = ['--peers', 'a@127.0.0.1:7001,b@127.0.0.1:7002', '--node-id', 'a'];
  const files = ['--tls-cert-file', 'c.pem', '--tls-key-file', 'k.pem', '--tls-ca-cert-file', 'ca.pem'];
  const args = parseCliArgs(['--tls-cluster', ...files, ...peers], {});
  assert.deepEqual(args.peerTls, {
    certFile: 'c.pem',
    keyFile: 'k.pem',
    caFile: 'ca.pem',
    clientCertFile: undefined,
    clientKeyFile: undefined,
  });
  assert.equal(args.tls, undefined, 'no TLS port for clients');
  assert.equal(
    parseCliArgs(
      [
        '--tls-cluster',
        ...files,
        ...peers,
        '--tls-client-cert-file',
        'cc.pem',
        '--tls-client-key-file',
        'ck.pem',
      ],
      {},
    ).peerTls?.clientKeyFile,
    'ck.pem',
  );
  assert.throws(() => parseCliArgs(['--tls-cluster', ...files], {}), /--tls-cluster needs --peers/);
  assert.throws(
    () => parseCliArgs(['--tls-cluster', ...files.slice(0, 4), ...peers], {}),
    /--tls-cluster needs --tls-cert-file, --tls-key-file and --tls-ca-cert-file/,
  );
  assert.throws(
    () => parseCliArgs(['--tls-cluster', ...files, ...peers, '--tls-client-cert-file', 'cc.pem'], {}),
    /--tls-client-cert-file and --tls-client-key-file go together/,
  );
  assert.throws(
    () => parseCliArgs([...peers, '--tls-client-key-file', 'ck.pem'], {}),
    /--tls-client-key-file is given without --tls-cluster/,
  );
  assert.equal(parseCliArgs(peers, {}).peerTls, undefined);
});

test('TLS and admin flags: what each needs is checked where the flags enter', () => {
  const tls = ['--tls-port', '6443', '--tls-cert-file', 'c.pem', '--tls-key-file', 'k.pem'];
  assert.deepEqual(parseCliArgs([...tls, '--tls-ca-cert-file', 'ca.pem'], {}).tls, {
    port: 6443,
    certFile: 'c.pem',
    keyFile: 'k.pem',
    caFile: 'ca.pem',
    authClients: 'yes',
    only: false,
  });
  assert.equal(parseCliArgs([...tls, '--tls-auth-clients', 'no', '--tls-only'], {}).tls?.only, true);
  assert.throws(() => parseCliArgs(['--tls-only'], {}), /--tls-only is given without --tls-port/);
  // Cluster clients are sent to the TLS port when it is the only one.
  const peers = ['--peers', 'a@127.0.0.1:7001,b@127.0.0.1:7002', '--node-id', 'a'];
  assert.equal(
    parseCliArgs([...tls, '--tls-auth-clients', 'no', '--tls-only', ...peers], {}).options.clientPort,
    6443,
  );
  assert.equal(parseCliArgs([...tls, '--tls-auth-clients', 'no', ...peers], {}).options.clientPort, 6380);
  assert.throws(
    () => parseCliArgs([...tls, '--tls-auth-clients', 'no', '--tls-only', '--port', '7000'], {}),
    /with --tls-only there is no plain port/,
  );
  assert.equal(parseCliArgs([...tls, '--tls-auth-clients', 'no'], {}).tls?.authClients, 'no');
  assert.throws(() => parseCliArgs(tls, {}), /--tls-auth-clients yes needs --tls-ca-cert-file/);
  assert.throws(() => parseCliArgs(['--tls-port', '6443'], {}), /needs --tls-cert-file and --tls-key-file/);
  assert.throws(
    () => parseCliArgs(['--tls-cert-file', 'c.pem'], {}),
    /--tls-cert-file is given without --tls-port/,
  );
  assert.throws(() => parseCliArgs([...tls, '--tls-auth-clients', 'maybe'], {}), /one of yes, no, optional/);
  assert.equal(parseCliArgs([], {}).tls, undefined);
  assert.deepEqual(parseCliArgs(['--admin-port', '0'], {}).admin, {
    port: 0,
    bind: '127.0.0.1',
    token: undefined,
  });
  // Beyond loopback, cluster changes must be guarded: no token, no start.
  const exposed = parseCliArgs(['--admin-port', '0', '--admin-bind', '0.0.0.0'], {}).admin!;
  assert.throws(
    () => checkAdminExposure(exposed),
    /--admin-bind 0.0.0.0 exposes the admin port beyond this machine: give --admin-token/,
  );
  checkAdminExposure(parseCliArgs(['--admin-port', '0'], {}).admin!);
  const token = 'an-admin-token-of-16-bytes+';
  const guarded = parseCliArgs(['--admin-port', '0', '--admin-bind', '0.0.0.0'], {
    TESSERA_ADMIN_TOKEN: token,
  });
  assert.deepEqual(guarded.admin, { port: 0, bind: '0.0.0.0', token });
  checkAdminExposure(guarded.admin!);
  assert.throws(
    () => parseCliArgs(['--admin-token', 'short'], {}),
    /--admin-token must be at least 16 bytes/,
  );
  assert.throws(() => parseCliArgs(['--admin-port', '70000'], {}), /--admin-port must be in 0..65535/);
  assert.equal(parseCliArgs([], {}).admin, undefined);
});
