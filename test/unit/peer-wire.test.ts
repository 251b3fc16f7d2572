// Peer frames and static placement: the frame reader's limits, routing fields read without
// decoding, and rendezvous placement's determinism, balance and small movement on membership change
// (by fast-check against each fragment's full ranking of the members).

import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import fc from 'fast-check';
import protobuf from 'protobufjs';
import { desiredPlacement, firstPlacement } from '../../src/core/coordinator.js';
import { Keyspace } from '../../src/core/keyspace.js';
import { Modifier } from '../../src/core/modify.js';
import { Durability, OpKind, Priority, Reply } from '../../src/core/ops.js';
import {
  EnvelopeField,
  FrameReader,
  forEachField,
  frameOf,
  ListFrameBuilder,
  maxWallMsField,
  peekEnvelope,
  peekFragment,
} from '../../src/core/peer-frame.js';
import { placementOf, sortMembers } from '../../src/core/placement.js';
import { encodeRecord } from '../../src/core/record.js';
import { AckLevel } from '../../src/core/replication-sender.js';
import { encodeReconcileResponse, newestWallMs } from '../../src/core/replication-wire.js';
import { resolveClusterConfig } from '../../src/main/cluster-config.js';
import {
  checkRequest,
  checkResult,
  REPLICA_WAIT_PARAMS_BYTES,
  RESULT_HEADER_BYTES,
  type ReplicaWaitParams,
  RequestFlag,
  ResultKind,
  readReplicaWaitParams,
  requestFlags,
  requestStampAt,
  scanPageBytes,
  writeModifyParams,
  writeReplicaWaitParams,
  writeRequestHeader,
  writeResultHeader,
  writeScanPage,
} from '../../src/threads/op-codec.js';
import { decodeEnvelope, encodeEnvelope } from '../../src/threads/peer-messages.js';

describe('frames', () => {
  test('the reader cuts frames across chunk boundaries and enforces the limit', () => {
    const a = frameOf(Buffer.from('hello'));
    const b = frameOf(Buffer.alloc(300, 7));
    const stream = Buffer.concat([a, b]);
    const reader = new FrameReader();
    const out: Buffer[] = [];
    for (let i = 0; i < stream.length; i += 3) {
      reader.push(stream.subarray(i, i + 3));
      for (let f = reader.next(); f instanceof Buffer; f = reader.next()) out.push(Buffer.from(f));
    }
    assert.deepEqual(out, [Buffer.from('hello'), Buffer.alloc(300, 7)]);
    assert.equal(reader.bufferedBytes, 0);

    const big = new FrameReader();
    const header = Buffer.alloc(4);
    header.writeUInt32BE(4097);
    big.push(header);
    const error = big.next();
    assert.ok(error instanceof Error && /4097 bytes exceeds the 4096-byte limit/.test(error.message));
    big.limit = 16 * 1024 * 1024;
    assert.equal(big.next(), undefined, 'after the handshake the same frame is merely incomplete');
  });

  test('routing fields are read without decoding the rest, zero fragments included', () => {
    const batch = encodeEnvelope({
      replicateBatch: {
        fragment: 9,
        sessionId: 3,
        batchSeq: 1,
        requiredAckLevel: 2,
        maxWallMs: 1_764_500_000_123,
        ops: [{ key: Buffer.from('k'), record: Buffer.alloc(40, 1) }],
      },
    });
    const peek = peekEnvelope(batch)!;
    assert.equal(peek.field, EnvelopeField.ReplicateBatch);
    assert.deepEqual(peekFragment(batch, peek.start, peek.end, maxWallMsField(peek.field)), {
      fragment: 9,
      maxWallMs: 1_764_500_000_123,
    });
    const start = encodeEnvelope({ sessionStart: { fragment: 0, sessionId: 5 } });
    const p2 = peekEnvelope(start)!;
    assert.deepEqual(peekFragment(start, p2.start, p2.end), { fragment: 0, maxWallMs: 0 });
    assert.equal(decodeEnvelope(start).sessionStart?.sessionId, 5);
  });

  test('every message that carries records has its newest stamp peeked, so the clock observes it first', () => {
    const root = protobuf.loadSync(fileURLToPath(new URL('../../../proto/peer.proto', import.meta.url)));
    const envelope = root.lookupType('tessera.peer.v1.Envelope');
    let carriers = 0;
    for (const field of envelope.fieldsArray) {
      const message = root.lookup(field.type);
      if (!(message instanceof protobuf.Type)) continue;
      const carriesRecords = message.fieldsArray.some((f) => f.type === 'ReplicatedOp');
      const stamp = message.fieldsArray.find((f) => f.name === 'maxWallMs');
      if (carriesRecords) carriers++;
      assert.equal(maxWallMsField(field.id), carriesRecords ? stamp?.id : 0, `${message.name}'s max_wall_ms`);
    }
    assert.equal(carriers, 3);
    const record = (wallMs: number) => encodeRecord(false, wallMs, 0, 0, Buffer.from('n1'), Buffer.from('v'));
    const records = [
      { key: Buffer.from('a'), record: record(1_764_500_000_200) },
      { key: Buffer.from('b'), record: record(1_764_500_000_900) },
    ];
    const page = encodeReconcileResponse({
      fragment: 4,
      sessionId: 1,
      roundId: 1,
      pageSeq: 0,
      summaries: [],
      done: true,
      nextAfterKey: Buffer.alloc(0),
      records,
      maxWallMs: newestWallMs(records),
    });
    const peek = peekEnvelope(page)!;
    assert.deepEqual(peekFragment(page, peek.start, peek.end, maxWallMsField(peek.field)), {
      fragment: 4,
      maxWallMs: 1_764_500_000_900,
    });
  });

  test("a node's worker ports travel as ClientPorts, a message of its own; none is an empty list", () => {
    const told = encodeEnvelope({ clientPorts: { workerPorts: [7410, 7411, 7412], workerGroups: 3 } });
    assert.equal(peekEnvelope(told)!.field, EnvelopeField.ClientPorts);
    assert.deepEqual(decodeEnvelope(told).clientPorts, { workerPorts: [7410, 7411, 7412], workerGroups: 3 });
    const closed = encodeEnvelope({ clientPorts: { workerPorts: [], workerGroups: 0 } });
    assert.equal(peekEnvelope(closed)!.field, EnvelopeField.ClientPorts);
    assert.deepEqual(decodeEnvelope(closed).clientPorts, { workerPorts: [], workerGroups: 0 });
  });

  test('list frames built by hand decode as protobuf, and read back without it', () => {
    const builder = new ListFrameBuilder(EnvelopeField.ForwardedOps, 2);
    const items = [Buffer.from('first'), Buffer.alloc(200, 9), Buffer.alloc(0)];
    for (const item of items) builder.buffer.set(item, builder.reserve(item.length));
    // Two scalars in front of the items, the largest a varint field here may hold among them.
    const frame = builder.finish(1, 3, 3, 0xffffffff);
    assert.equal(frame.readUInt32BE(0), frame.length - 4);
    const envelope = frame.subarray(4);
    assert.deepEqual(decodeEnvelope(envelope).forwardedOps, { hops: 3, generation: 0xffffffff, ops: items });
    const peek = peekEnvelope(envelope)!;
    const seen: Buffer[] = [];
    let hops = 0;
    let generation = 0;
    const ok = forEachField(
      envelope,
      peek.start,
      peek.end,
      2,
      (a, b) => seen.push(Buffer.from(envelope.subarray(a, b))),
      (f, v) => {
        if (f === 1) hops = v;
        if (f === 3) generation = v;
      },
    );
    assert.equal(ok, true);
    assert.deepEqual(seen, items);
    assert.equal(hops, 3);
    assert.equal(generation, 0xffffffff);
    // The builder is reused: the next frame holds only what was added since.
    builder.buffer.set(Buffer.from('x'), builder.reserve(1));
    assert.deepEqual(decodeEnvelope(builder.finish().subarray(4)).forwardedOps, {
      hops: 0,
      generation: 0,
      ops: [Buffer.from('x')],
    });
    assert.equal(
      forEachField(Buffer.from([0x12, 0x05, 0x01]), 0, 3, 2, () => {}),
      false,
      'truncated item',
    );
  });

  test('malformed envelopes are recognised', () => {
    assert.equal(peekEnvelope(new Uint8Array(0)), undefined);
    assert.equal(peekEnvelope(Buffer.from([0x08, 0x01])), undefined, 'a varint is not a message');
    assert.equal(peekEnvelope(Buffer.from([0x32, 0x05, 0x08])), undefined, 'truncated body');
    assert.equal(peekFragment(Buffer.from([0x08]), 0, 1), undefined, 'truncated varint');
    assert.equal(peekFragment(Buffer.from([0x0f, 0x00]), 0, 2), undefined, 'unknown wire type');
    assert.throws(() => decodeEnvelope(Buffer.from([0x32, 0x05, 0x08])));
  });
});

describe("a new cluster's placement", () => {
  const lists = (members: string[], fragments: number, replicas: number) => {
    const p = placementOf(members, firstPlacement(members, fragments, replicas));
    return p.replicas.map((r) => r.map((m) => p.members[m]!));
  };

  test('every node computes the same lists, whatever order it lists the members in', () => {
    const one = placementOf(['c', 'a', 'b', 'd'], firstPlacement(['c', 'a', 'b', 'd'], 64, 3));
    const two = placementOf(['d', 'b', 'a', 'c'], firstPlacement(['d', 'b', 'a', 'c'], 64, 3));
    assert.deepEqual(one, two);
    assert.deepEqual(one.members, ['a', 'b', 'c', 'd']);
    for (const replicas of one.replicas) assert.equal(new Set(replicas).size, 3, 'distinct replicas');
  });

  test('fast-check: each member holds and serves an even share, and the first plan moves nothing', () => {
    fc.assert(
      fc.property(
        fc.uniqueArray(fc.string({ minLength: 1, maxLength: 6 }), { minLength: 1, maxLength: 9 }),
        fc.integer({ min: 1, max: 256 }),
        fc.integer({ min: 1, max: 3 }),
        (members, fragments, r) => {
          const replicas = Math.min(r, members.length);
          const placed = lists(members, fragments, replicas);
          const held = new Map(members.map((id) => [id, 0]));
          const serving = new Map(members.map((id) => [id, 0]));
          for (const list of placed) {
            assert.equal(new Set(list).size, replicas);
            for (const id of list) held.set(id, held.get(id)! + 1);
            serving.set(list[0]!, serving.get(list[0]!)! + 1);
          }
          const share = (fragments * replicas) / members.length;
          for (const n of held.values()) assert.ok(n >= Math.floor(share) && n <= Math.ceil(share) + 1);
          // One replica each: a member serves what it holds. More: as evenly as can be — when there
          // are fewer fragments than members, some serve none, and a chain may leave one with two.
          const served = [...serving.values()];
          if (replicas === 1) assert.deepEqual(serving, held);
          else if (fragments >= members.length)
            assert.ok(Math.max(...served) - Math.min(...served) <= 1, `serving ${served}`);
          else assert.ok(Math.max(...served) <= 2, `serving ${served}`);
          // The coordinator's planner keeps every list as it is: a new cluster starts with no move.
          const all = Array.from({ length: fragments }, (_, f) => f);
          const { desired } = desiredPlacement(
            all,
            new Map(),
            sortMembers(members),
            replicas,
            fragments,
            placed,
          );
          for (const f of all) assert.deepEqual(desired.get(f), placed[f]);
        },
      ),
    );
  });
});

describe('cluster options', () => {
  const peers = 'a@127.0.0.1:7001,b@127.0.0.1:7002,c@127.0.0.1:7003';
  test('defaults and the member list', () => {
    const c = resolveClusterConfig({ peers }, 'b', 16)!;
    assert.deepEqual(c.members, ['a', 'b', 'c']);
    assert.equal(c.selfIndex, 1);
    assert.equal(c.peerPort, 7002);
    assert.equal(c.replicas, 3);
    assert.equal(c.addresses[1], undefined);
    assert.equal(c.moveRateBytesPerSec, 32 * 1024 * 1024);
    assert.equal(c.antiEntropyKeysPerSec, 5_000);
    assert.equal(resolveClusterConfig({}, 'b', 16), undefined);
  });

  test('--move-rate: 0 is unlimited; otherwise between 64 KiB/s and 64 GiB/s', () => {
    for (const rate of [0, 64 * 1024, 64 * 1024 ** 3])
      assert.equal(
        resolveClusterConfig({ peers, moveRateBytesPerSec: rate }, 'a', 16)!.moveRateBytesPerSec,
        rate,
      );
    for (const rate of [1, 64 * 1024 - 1, 64 * 1024 ** 3 + 1, 1.5, -1])
      assert.throws(
        () => resolveClusterConfig({ peers, moveRateBytesPerSec: rate }, 'a', 16),
        /moveRateBytesPerSec must be 0 \(unlimited\) or an integer in 65536\.\.68719476736/,
      );
    assert.throws(() => resolveClusterConfig({ moveRateBytesPerSec: 0 }, 'a', 16), /needs peers/);
  });

  test('--anti-entropy-rate: 0 is unlimited; otherwise between 100 and a billion keys a second', () => {
    for (const rate of [0, 100, 1_000_000_000])
      assert.equal(
        resolveClusterConfig({ peers, antiEntropyKeysPerSec: rate }, 'a', 16)!.antiEntropyKeysPerSec,
        rate,
      );
    for (const rate of [1, 99, 1_000_000_001, 1.5, -1])
      assert.throws(
        () => resolveClusterConfig({ peers, antiEntropyKeysPerSec: rate }, 'a', 16),
        /antiEntropyKeysPerSec must be 0 \(unlimited\) or an integer in 100\.\.1000000000 keys per second/,
      );
  });

  test('--cluster-redirects: forward by default, moved on request, nothing else', () => {
    assert.equal(resolveClusterConfig({ peers }, 'a', 16)!.redirectsMoved, false);
    assert.equal(
      resolveClusterConfig({ peers, clusterRedirects: 'forward' }, 'a', 16)!.redirectsMoved,
      false,
    );
    assert.equal(resolveClusterConfig({ peers, clusterRedirects: 'moved' }, 'a', 16)!.redirectsMoved, true);
    assert.throws(
      () => resolveClusterConfig({ peers, clusterRedirects: 'ask' as 'moved' }, 'a', 16),
      /clusterRedirects must be one of forward, moved, got "ask"/,
    );
  });

  test('bad options are refused with a message that names them', () => {
    assert.throws(() => resolveClusterConfig({ peers }, undefined, 16), /needs nodeId/);
    assert.throws(() => resolveClusterConfig({ peers: 'a@127.0.0.1' }, 'a', 16), /not id@host:port/);
    assert.throws(() => resolveClusterConfig({ peers, replicas: 4 }, 'a', 16), /replicas must be/);
    assert.throws(
      () => resolveClusterConfig({ peers, clusterSecret: 'short' }, 'a', 16),
      /at least 32 bytes/,
    );
    assert.throws(() => resolveClusterConfig({ peers: 'a@10.0.0.1:1,b@10.0.0.2:1' }, 'a', 16), /plaintext/);
    assert.ok(resolveClusterConfig({ peers: 'a@10.0.0.1:1,b@10.0.0.2:1', insecure: true }, 'a', 16));
    assert.throws(() => resolveClusterConfig({ replicas: 2 }, 'a', 16), /needs peers/);
    assert.throws(
      () => resolveClusterConfig({ peers: 'a@127.0.0.1:1,a@127.0.0.1:2' }, 'a', 16),
      /listed twice/,
    );
  });

  test('peer TLS: cert, key and CA are required, client cert and key go together and default to the cert', () => {
    const pem = 'not checked until a connection is made';
    const full = { cert: pem, key: pem, ca: pem };
    const tls = resolveClusterConfig({ peers, peerTls: full }, 'a', 16)!.tls!;
    assert.deepEqual(tls.clientCert, Buffer.from(pem));
    assert.equal(resolveClusterConfig({ peers }, 'a', 16)!.tls, undefined);
    assert.throws(
      () => resolveClusterConfig({ peers, peerTls: { cert: pem, key: pem } as never }, 'a', 16),
      /needs cert, key and ca/,
    );
    assert.throws(
      () => resolveClusterConfig({ peers, peerTls: { ...full, clientCert: pem } }, 'a', 16),
      /clientCert and clientKey together/,
    );
    assert.throws(
      () => resolveClusterConfig({ peers, peerTls: { ...full, ca: '' } }, 'a', 16),
      /peerTls.ca is empty/,
    );
    assert.throws(
      () => resolveClusterConfig({ peers, peerTls: { ...full, key: 42 as never } }, 'a', 16),
      /peerTls.key must be PEM text/,
    );
    assert.throws(() => resolveClusterConfig({ peerTls: full }, 'a', 16), /peerTls needs peers/);
  });
});

describe('requests from peers', () => {
  const keyspace = new Keyspace(16);
  const fragmentOf = (key: Uint8Array) => keyspace.fragmentOf(key);
  const key = Buffer.from('user:1');
  const fragment = fragmentOf(key);
  const stamp = encodeRecord(false, 1000, 0, 0, Buffer.from('a'), Buffer.from('value'));

  const waitFor2 = { replicas: 2, level: AckLevel.Store, timeoutMs: 500 };

  /** A request of `kind` for `key`, waiting for replicas when `wait` is given. */
  function request(
    kind: number,
    body: (buf: Buffer, at: number) => number,
    wait?: ReplicaWaitParams,
    onKey = key,
  ): Buffer {
    const buf = Buffer.alloc(4096);
    const flags =
      requestFlags(Priority.Default, Durability.Store) | (wait === undefined ? 0 : RequestFlag.ReplicaWait);
    let at = writeRequestHeader(buf, 0, kind, flags, fragment, 9, onKey);
    if (wait !== undefined) at = writeReplicaWaitParams(buf, at, wait);
    return buf.subarray(0, body(buf, at));
  }
  const write = (wait?: ReplicaWaitParams) =>
    request(OpKind.Write, (buf, at) => at + stamp.copy(buf, at), wait);
  const modify = (modifier: number, operand?: Buffer, wait?: ReplicaWaitParams) =>
    request(
      OpKind.Modify,
      (buf, at) => {
        const p = writeModifyParams(buf, at, modifier as Modifier, 0, 0, operand);
        return p + stamp.copy(buf, p);
      },
      wait,
    );
  const fence = (wait: ReplicaWaitParams) => request(OpKind.Fence, (_b, at) => at, wait, Buffer.alloc(0));

  test('a write or fence that waits for replicas carries the wait after its key, before its record', () => {
    assert.equal(checkRequest(write(waitFor2), 16, fragmentOf), undefined);
    assert.equal(
      checkRequest(modify(Modifier.IncrBy, Buffer.from('5'), waitFor2), 16, fragmentOf),
      undefined,
    );
    assert.equal(checkRequest(fence(waitFor2), 16, fragmentOf), undefined);
    const waiting = write(waitFor2);
    assert.deepEqual(waiting.subarray(requestStampAt(waiting)), stamp);
    assert.equal(requestStampAt(waiting), requestStampAt(write()) + REPLICA_WAIT_PARAMS_BYTES);
    assert.deepEqual(readReplicaWaitParams(waiting, 0), waitFor2);
    const incr = modify(Modifier.IncrBy, Buffer.from('5'), waitFor2);
    assert.deepEqual(incr.subarray(requestStampAt(incr)), stamp);
    // A read waits for nothing; a wait's parameters are checked as a fence's are.
    assert.match(
      checkRequest(
        request(OpKind.Read, (_b, at) => at, waitFor2),
        16,
        fragmentOf,
      ) ?? 'accepted',
      /only fences and writes wait for replicas/,
    );
    const badLevel = write(waitFor2);
    badLevel[10 + key.length + 1] = 9;
    assert.match(checkRequest(badLevel, 16, fragmentOf) ?? 'accepted', /bad replica wait parameters/);
    assert.match(
      checkRequest(write(waitFor2).subarray(0, 10 + key.length + 3), 16, fragmentOf) ?? 'accepted',
      /bad replica wait length/,
    );
  });

  test('well-formed requests pass', () => {
    assert.equal(checkRequest(write(), 16, fragmentOf), undefined);
    assert.equal(
      checkRequest(
        request(OpKind.Read, (_b, at) => at),
        16,
        fragmentOf,
      ),
      undefined,
    );
    assert.equal(checkRequest(modify(Modifier.IncrBy, Buffer.from('5')), 16, fragmentOf), undefined);
    assert.equal(
      checkRequest(modify(Modifier.Rename, Buffer.from('{user:1}.old')), 16, fragmentOf),
      undefined,
    );
  });

  test('malformed requests are named, before any worker sees them', () => {
    const cases: Array<[string, Buffer]> = [
      ['shorter than its header', write().subarray(0, 6)],
      ['record', write().subarray(0, 20)],
      ['unknown modifier', modify(99)],
      ['RENAME or COPY target', modify(Modifier.Rename, Buffer.from('x'.repeat(1025)))],
      ['trailing bytes', Buffer.concat([request(OpKind.Read, (_b, at) => at), Buffer.from('x')])],
    ];
    const otherFragment = write();
    otherFragment.writeUInt16LE((fragment + 1) % 16, 2);
    cases.push(['another fragment', otherFragment]);
    const badLength = modify(Modifier.IncrBy, Buffer.from('5'));
    badLength.writeUInt16LE(500, 10 + key.length + 6);
    cases.push(['modify parameters', badLength]);
    // A RENAME whose target another fragment owns would plant the key where no reader looks.
    let foreign = 'other:0';
    for (let i = 1; fragmentOf(Buffer.from(foreign)) === fragment; i++) foreign = `other:${i}`;
    cases.push(['RENAME or COPY target', modify(Modifier.Rename, Buffer.from(foreign))]);
    const kind = write();
    kind[0] = 17;
    cases.push(['cannot be forwarded', kind]);
    for (const [reason, op] of cases) {
      assert.match(checkRequest(op, 16, fragmentOf) ?? 'accepted', new RegExp(reason), reason);
    }
  });
});

describe('results from peers', () => {
  const record = encodeRecord(false, 1000, 0, 0, Buffer.from('a'), Buffer.from('value'));
  const result = (status: number, payload: Buffer, detail = 0) => {
    const buf = Buffer.alloc(RESULT_HEADER_BYTES + payload.length);
    writeResultHeader(buf, 0, status, detail, 7);
    payload.copy(buf, RESULT_HEADER_BYTES);
    return buf;
  };
  const scanPage = (entries: Array<{ key: Buffer; record: Buffer | undefined }>) => {
    const buf = Buffer.alloc(scanPageBytes(entries, undefined));
    writeScanPage(buf, 0, true, undefined, entries);
    return buf;
  };
  const check = (buf: Buffer) => checkResult(buf, 0, buf.length);

  test('well-formed results pass', () => {
    assert.equal(check(result(Reply.Found, record)), undefined);
    assert.equal(check(result(Reply.NotFound, Buffer.alloc(0))), undefined);
    assert.equal(check(result(ResultKind.Error, Buffer.from('no'), 7)), undefined);
    assert.equal(
      check(result(ResultKind.ScanPage, scanPage([{ key: Buffer.from('k'), record }]))),
      undefined,
    );
  });

  test('malformed results are named', () => {
    assert.match(check(result(Reply.Found, record.subarray(0, 10))) ?? '', /malformed record/);
    assert.match(check(result(99, Buffer.alloc(0))) ?? '', /unknown result status/);
    assert.match(check(result(ResultKind.Error, Buffer.alloc(0), 42)) ?? '', /unknown error kind/);
    const page = scanPage([{ key: Buffer.from('k'), record }]);
    assert.match(check(result(ResultKind.ScanPage, page.subarray(0, page.length - 3))) ?? '', /scan/);
    assert.match(check(Buffer.alloc(4)) ?? '', /shorter than its header/);
  });
});
