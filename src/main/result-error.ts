// Decoding a failed result record into the typed error it stands for.

import { backpressure, ErrorKind, expired, isErrorKind, superseded, TesseraError } from '../core/errors.js';
import { Reply } from '../core/ops.js';
import { logicalOf, nodeIdOf, wallMsOf } from '../core/record.js';
import { RESULT_HEADER_BYTES, resultDetail, resultStatus } from '../threads/op-codec.js';

/** The error a failed result carries: its status (and, for Error, the kind in `detail`) and message. */
export function resultError(buf: Buffer, at: number, length: number): TesseraError {
  const status = resultStatus(buf, at);
  const message = buf.toString('utf8', at + RESULT_HEADER_BYTES, at + length);
  switch (status) {
    case Reply.Superseded: {
      const r = buf.subarray(at + RESULT_HEADER_BYTES, at + length);
      return superseded({
        wallMs: wallMsOf(r),
        logical: logicalOf(r),
        nodeId: Buffer.from(nodeIdOf(r)).toString('utf8'),
        tombstone: (r[0] & 1) === 1,
      });
    }
    case Reply.Expired:
      return expired();
    case Reply.Backpressure:
      return backpressure(message);
    case Reply.StorageFailed:
      return new TesseraError(ErrorKind.Storage, message);
    default: {
      const kind = resultDetail(buf, at);
      return new TesseraError(isErrorKind(kind) ? kind : ErrorKind.Internal, message);
    }
  }
}
