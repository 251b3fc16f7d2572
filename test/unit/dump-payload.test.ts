// DUMP / RESTORE payloads (src/core/dump-payload.ts). The payloads are what redis-server 7.0.15
// answered to DUMP for the same values.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import {
  crc64,
  dumpPayload,
  ERR_BAD_FORMAT,
  ERR_DUMP_CHECK,
  ERR_NOT_STRING_PAYLOAD,
  lzfDecompress,
  restoreValue,
} from '../../src/core/dump-payload.js';

const VALUE_BYTES_MAX = 4 * 1024 * 1024;
const bytes = (hex: string) => Buffer.from(hex.replace(/ /g, ''), 'hex');

const REDIS_DUMPS: Array<[string, Buffer]> = [
  ['hello', bytes('000568656c6c6f0a006372df766534200a')],
  ['1', bytes('00c0010a002678e7b6d10111fc')],
  ['1000', bytes('00c1e8030a0089d1478ebac4b764')],
  ['100000', bytes('00c2a08601000a00f12403506f2fa674')],
];

test('CRC-64/Jones check value', () => {
  assert.equal(crc64(Buffer.from('123456789')).readBigUInt64LE(0), 0xe9c6d914c4b8d9can);
});

test("DUMP writes Redis's bytes for raw strings and 8, 16 and 32-bit integers", () => {
  for (const [value, payload] of REDIS_DUMPS)
    assert.deepEqual(dumpPayload(Buffer.from(value)), payload, value);
});

test("RESTORE reads Redis's payloads, LZF-compressed ones included", () => {
  for (const [value, payload] of REDIS_DUMPS)
    assert.deepEqual(restoreValue(payload, VALUE_BYTES_MAX), Buffer.from(value));
  // DUMP of 100 "a"s: LZF, 9 compressed bytes for 100.
  const lzf = bytes('00c3094064016161e057000161610a00e8a3b507b06df271');
  assert.deepEqual(restoreValue(lzf, VALUE_BYTES_MAX), Buffer.from('a'.repeat(100)));
});

test('RESTORE refuses a wrong checksum, a later RDB version, another type, and a string past the limit', () => {
  const good = dumpPayload(Buffer.from('value'));
  const flipped = Buffer.from(good);
  flipped[2] ^= 1;
  assert.equal(restoreValue(flipped, VALUE_BYTES_MAX), ERR_DUMP_CHECK);
  assert.equal(restoreValue(good.subarray(0, 9), VALUE_BYTES_MAX), ERR_DUMP_CHECK);
  const withFooter = (body: Buffer, version = 10) => {
    const head = Buffer.concat([body, Buffer.from([version, 0])]);
    return Buffer.concat([head, crc64(head)]);
  };
  assert.equal(restoreValue(withFooter(Buffer.from([0, 1, 0x61]), 11), VALUE_BYTES_MAX), ERR_DUMP_CHECK);
  assert.deepEqual(restoreValue(withFooter(Buffer.from([0, 1, 0x61]), 9), VALUE_BYTES_MAX), Buffer.from('a'));
  assert.equal(
    restoreValue(withFooter(Buffer.from([1, 0])), VALUE_BYTES_MAX),
    ERR_NOT_STRING_PAYLOAD,
    'a list',
  );
  // Redis reads the string from the whole payload, footer included: only a length past its end is cut short.
  assert.equal(
    restoreValue(withFooter(Buffer.from([0, 50, 0x61])), VALUE_BYTES_MAX),
    ERR_BAD_FORMAT,
    'cut short',
  );
  assert.match(
    String(restoreValue(withFooter(Buffer.from([0, 50, 0x61])), 4)),
    /exceeds maximum allowed size/,
  );
});

test('LZF decompression refuses back references before the start and output past its room', () => {
  assert.equal(lzfDecompress(Buffer.from([0x20, 0x05]), Buffer.alloc(10)), -1);
  assert.equal(lzfDecompress(Buffer.from([0x01, 0x61, 0x62]), Buffer.alloc(1)), -1);
});

test('property: what DUMP writes, RESTORE reads back', () => {
  fc.assert(
    fc.property(
      fc.oneof(
        fc.uint8Array({ maxLength: 20_000 }),
        fc.integer().map((n) => Buffer.from(String(n))),
      ),
      (value) => {
        assert.deepEqual(restoreValue(dumpPayload(value), VALUE_BYTES_MAX), Buffer.from(value));
      },
    ),
    { numRuns: 200 },
  );
});
