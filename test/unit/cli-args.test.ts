// Command-line flags and their environment variables (DESIGN.md "Faces: CLI").
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { envName, helpText, parseCliArgs, parseDuration, parseSize } from '../../src/main/cli-args.js';

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
    ['--flush-interval', '250ms', '--value-bytes-max', '1mb', '--log-level', 'warn'],
    {},
  );
  assert.deepEqual(more.options, { flushIntervalMs: 250, valueBytesMax: 1024 * 1024 });
  assert.equal(more.logLevel, 'warn');
});

test('every flag reads its environment variable; the command line wins', () => {
  assert.equal(envName('peer-port'), 'TESSERA_PEER_PORT');
  const args = parseCliArgs(['--workers', '2'], {
    TESSERA_WORKERS: '5',
    TESSERA_STORE: 'memory',
    TESSERA_CLEAN_INTERVAL: '5s',
  });
  assert.deepEqual(args.options, { workers: 2, store: 'memory', cleanIntervalMs: 5000 });
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
