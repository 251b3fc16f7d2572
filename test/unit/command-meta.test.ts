// The COMMAND INFO / DOCS data (src/main/resp/command-meta.ts, generated from redis-server) agrees
// with the command table: every command Tessera supports is described, with the table's arity and key
// positions, and the value encoding is written back in RESP2 and RESP3 as Redis writes it.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { RespWriter } from '../../src/core/resp-writer.js';
import { COMMAND_DOCS, COMMAND_INFO } from '../../src/main/resp/command-meta.js';
import { type MetaValue, writeMetaValue } from '../../src/main/resp/command-meta-value.js';
import { COMMANDS } from '../../src/main/resp/commands.js';
import { UNSUPPORTED_COMMANDS } from '../../src/main/resp/unsupported-commands.js';

test('every supported command is described, with the command table’s arity and key positions', () => {
  const refused = new Set(UNSUPPORTED_COMMANDS.map((c) => c.name));
  const supported = COMMANDS.filter((c) => !refused.has(c.name) && !c.name.startsWith('TESSERA.'));
  const infos = COMMAND_INFO as ReadonlyArray<readonly MetaValue[]>;
  assert.deepEqual(
    infos.map((info) => info[0]),
    supported.map((c) => c.name.toLowerCase()),
    'rerun bench/command-meta.ts after adding a command',
  );
  supported.forEach((spec, i) => {
    assert.deepEqual(infos[i].slice(0, 2), [spec.name.toLowerCase(), spec.arity]);
    assert.deepEqual(infos[i].slice(3, 6), [...spec.keys], spec.name);
    assert.ok(COMMAND_DOCS[spec.name.toLowerCase()] !== undefined, spec.name);
  });
});

test('metadata values are written with their RESP3 kinds, and as arrays in RESP2', () => {
  const value: MetaValue = [
    'get',
    2,
    { '~+': ['readonly'] },
    { '~': ['nondeterministic_output'] },
    { flags: { '~+': ['RO'] }, spec: { index: 1 } },
    { '+': 'simple' },
  ];
  const written = (protocol: 2 | 3) => {
    const w = new RespWriter(protocol);
    writeMetaValue(w, value);
    return w.bytes().toString('latin1');
  };
  assert.equal(
    written(3),
    '*6\r\n$3\r\nget\r\n:2\r\n~1\r\n+readonly\r\n~1\r\n$23\r\nnondeterministic_output\r\n' +
      '%2\r\n$5\r\nflags\r\n~1\r\n+RO\r\n$4\r\nspec\r\n%1\r\n$5\r\nindex\r\n:1\r\n+simple\r\n',
  );
  assert.equal(
    written(2),
    '*6\r\n$3\r\nget\r\n:2\r\n*1\r\n+readonly\r\n*1\r\n$23\r\nnondeterministic_output\r\n' +
      '*4\r\n$5\r\nflags\r\n*1\r\n+RO\r\n$4\r\nspec\r\n*2\r\n$5\r\nindex\r\n:1\r\n+simple\r\n',
  );
});
