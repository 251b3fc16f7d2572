// The layout of a membership datagram (UDP, beside the peer connection; README "Cluster"):
//
//   offset 0   u8        format (MEMBERSHIP_DATAGRAM_FORMAT)
//   offset 1   16 bytes  tag: the first 16 bytes of HMAC-SHA256(datagram key, envelope); zeros without a secret
//   offset 17  …         one Envelope carrying a membership message (threads/membership-wire.ts)
//
// The datagram key is derived from the cluster secret under its own label, so a tag can never be
// replayed as a handshake proof or the other way round. Without a cluster secret (a loopback or
// --insecure cluster) the tag is all zeros, as the peer handshake's is empty: such a cluster
// authenticates nothing. A datagram is checked whole before any of it is decoded.

import { createHmac, timingSafeEqual } from 'node:crypto';
import { MEMBERSHIP_DATAGRAM_BYTES_MAX } from '../core/limits.js';

export const MEMBERSHIP_DATAGRAM_FORMAT = 1;
const FORMAT_OFFSET = 0;
const TAG_OFFSET = 1;
const TAG_BYTES = 16;
export const DATAGRAM_HEADER_BYTES = TAG_OFFSET + TAG_BYTES;
/** The largest envelope one datagram carries; a larger message goes over the peer connection. */
export const DATAGRAM_ENVELOPE_BYTES_MAX = MEMBERSHIP_DATAGRAM_BYTES_MAX - DATAGRAM_HEADER_BYTES;
const KEY_LABEL = 'tessera membership datagram v1';

/** The key datagram tags are made with: HMAC-SHA256(secret, label); undefined without a secret. */
export function datagramKey(secret: Uint8Array | undefined): Buffer | undefined {
  return secret === undefined ? undefined : createHmac('sha256', secret).update(KEY_LABEL).digest();
}

function tagOf(key: Buffer, envelope: Uint8Array): Buffer {
  return createHmac('sha256', key).update(envelope).digest().subarray(0, TAG_BYTES);
}

/** The datagram carrying `envelope`; the caller has checked it fits (DATAGRAM_ENVELOPE_BYTES_MAX). */
export function encodeDatagram(key: Buffer | undefined, envelope: Uint8Array): Buffer {
  const datagram = Buffer.alloc(DATAGRAM_HEADER_BYTES + envelope.length);
  datagram[FORMAT_OFFSET] = MEMBERSHIP_DATAGRAM_FORMAT;
  if (key !== undefined) tagOf(key, envelope).copy(datagram, TAG_OFFSET);
  datagram.set(envelope, DATAGRAM_HEADER_BYTES);
  return datagram;
}

export type DatagramOpening = { kind: 'envelope'; envelope: Buffer } | { kind: 'refused'; reason: string };

/** Checks a received datagram's size, format and tag, and gives its envelope. */
export function openDatagram(key: Buffer | undefined, datagram: Buffer): DatagramOpening {
  if (datagram.length <= DATAGRAM_HEADER_BYTES) return { kind: 'refused', reason: 'datagram too short' };
  if (datagram.length > MEMBERSHIP_DATAGRAM_BYTES_MAX) {
    return {
      kind: 'refused',
      reason: `datagram of ${datagram.length} bytes exceeds MEMBERSHIP_DATAGRAM_BYTES_MAX (${MEMBERSHIP_DATAGRAM_BYTES_MAX})`,
    };
  }
  if (datagram[FORMAT_OFFSET] !== MEMBERSHIP_DATAGRAM_FORMAT) {
    return {
      kind: 'refused',
      reason: `datagram format ${datagram[FORMAT_OFFSET]} is not ${MEMBERSHIP_DATAGRAM_FORMAT}`,
    };
  }
  const envelope = datagram.subarray(DATAGRAM_HEADER_BYTES);
  const tag = datagram.subarray(TAG_OFFSET, DATAGRAM_HEADER_BYTES);
  const expected = key === undefined ? Buffer.alloc(TAG_BYTES) : tagOf(key, envelope);
  if (!timingSafeEqual(tag, expected))
    return { kind: 'refused', reason: 'cluster secret differs (bad datagram tag)' };
  return { kind: 'envelope', envelope };
}
