// PeerLink (src/main/mesh/peer-link.ts) when its peer goes away: reads and writes it held go to the
// fragment's next replica, a read-modify-write fails (it may have been applied), and a replica-wait
// fence fails — only the replica that took the writes may say how far they reached.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { TesseraError } from '../../src/core/errors.js';
import { Durability, OpKind, Priority } from '../../src/core/ops.js';
import { AckLevel } from '../../src/core/replication-sender.js';
import { PeerLink, type PeerLinkHost } from '../../src/main/mesh/peer-link.js';
import type { ResultHandler } from '../../src/main/worker-link.js';
import {
  REPLICA_WAIT_PARAMS_BYTES,
  RequestFlag,
  requestBytes,
  requestFlags,
  writeReplicaWaitParams,
  writeRequestHeader,
} from '../../src/threads/op-codec.js';

class Host implements PeerLinkHost {
  up = true;
  readonly frames: Buffer[] = [];
  readonly resubmitted: string[] = [];
  sendFrame(_member: number, frame: Buffer): boolean {
    this.frames.push(frame);
    return this.up;
  }
  isUp(): boolean {
    return this.up;
  }
  resubmit(fragment: number, _request: Buffer, _handler: ResultHandler<unknown>, token: unknown): void {
    this.resubmitted.push(`${token as string}@${fragment}`);
  }
}

const failures: string[] = [];
const handler: ResultHandler<unknown> = {
  onResult: () => {},
  onFailure: (token, error: TesseraError) => failures.push(`${token as string}: ${error.message}`),
};

/** Encodes a request of `kind` for fragment 7 through the link, as the dispatcher does. */
function send(link: PeerLink, token: string, kind: OpKind, replicaWait: boolean): void {
  const key = replicaWait ? Buffer.alloc(0) : Buffer.from('k');
  const record = replicaWait ? REPLICA_WAIT_PARAMS_BYTES : 0;
  const at = link.begin(handler, token, requestBytes(key.length, record));
  const flags =
    requestFlags(Priority.Default, Durability.Memory) | (replicaWait ? RequestFlag.ReplicaWait : 0);
  const p = writeRequestHeader(link.buffer, at, kind, flags, 7, link.reqId, key);
  if (replicaWait)
    writeReplicaWaitParams(link.buffer, p, { replicas: 1, level: AckLevel.Store, timeoutMs: 100 });
  link.end();
}

test('a disconnect sends reads on, fails a read-modify-write, and fails a replica-wait fence rather than ask another replica', async () => {
  const host = new Host();
  const link = new PeerLink(2, 'b', host);
  send(link, 'read', OpKind.Read, false);
  send(link, 'rmw', OpKind.Modify, false);
  send(link, 'wait', OpKind.Fence, true);
  await new Promise((resolve) => queueMicrotask(() => resolve(undefined)));
  assert.equal(host.frames.length, 1, 'one frame for the turn');
  assert.equal(link.pending, 3);
  link.onDisconnect();
  link.close();
  assert.deepEqual(host.resubmitted, ['read@7']);
  assert.deepEqual(failures, [
    'rmw: network error: peer b disconnected; the operation may or may not have been applied',
    'wait: network error: peer b disconnected before it confirmed its replicas',
  ]);
  assert.equal(link.pending, 0);
});
