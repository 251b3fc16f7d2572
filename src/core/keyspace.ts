// Keys → slots → fragments, exactly as Redis Cluster hashes keys (DESIGN.md "Slots and fragments"),
// so cluster-aware Redis clients can route by slot.

import { assert } from './assert.js';
import { FRAGMENT_COUNT_MAX, SLOT_COUNT } from './limits.js';

/** CRC16/XMODEM (poly 0x1021, init 0), the checksum Redis Cluster uses for key slots. */
const CRC16_TABLE = buildCrc16Table();

function buildCrc16Table(): Uint16Array {
  const table = new Uint16Array(256);
  for (let i = 0; i < 256; i++) {
    let crc = i << 8;
    for (let bit = 0; bit < 8; bit++)
      crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
    table[i] = crc;
  }
  return table;
}

export function crc16(bytes: Uint8Array, start = 0, end = bytes.length): number {
  let crc = 0;
  for (let i = start; i < end; i++) crc = ((crc << 8) & 0xffff) ^ CRC16_TABLE[((crc >> 8) ^ bytes[i]) & 0xff];
  return crc;
}

const OPEN_BRACE = 0x7b;
const CLOSE_BRACE = 0x7d;

/**
 * Redis Cluster's key slot: if the key holds `{…}` with at least one byte between the first `{` and
 * the first `}` after it, only those bytes are hashed (a "hash tag"), so related keys share a slot.
 */
export function slotOf(key: Uint8Array): number {
  return slotOfRange(key, 0, key.length);
}

/** The hash slot of the key at bytes[start, end), as `slotOf` (a key read in place, not copied out). */
export function slotOfRange(bytes: Uint8Array, start: number, end: number): number {
  // Scanned by hand: indexOf would run past `end` through the rest of a shared buffer.
  let open = start;
  while (open < end && bytes[open] !== OPEN_BRACE) open++;
  let close = open + 1;
  while (close < end && bytes[close] !== CLOSE_BRACE) close++;
  if (close < end && close > open + 1) return crc16(bytes, open + 1, close) & (SLOT_COUNT - 1);
  return crc16(bytes, start, end) & (SLOT_COUNT - 1);
}

/** Maps slots to fragments: fragment f of F owns slots [⌊f·16384/F⌋, ⌊(f+1)·16384/F⌋). */
export class Keyspace {
  readonly fragmentCount: number;
  private readonly fragmentBySlot: Uint16Array;

  constructor(fragmentCount: number) {
    assert(
      Number.isInteger(fragmentCount) && fragmentCount >= 1 && fragmentCount <= FRAGMENT_COUNT_MAX,
      `fragment count ${fragmentCount} outside 1..${FRAGMENT_COUNT_MAX}`,
    );
    this.fragmentCount = fragmentCount;
    this.fragmentBySlot = new Uint16Array(SLOT_COUNT);
    for (let f = 0; f < fragmentCount; f++) {
      const [first, end] = slotRange(f, fragmentCount);
      this.fragmentBySlot.fill(f, first, end);
    }
  }

  fragmentOfSlot(slot: number): number {
    return this.fragmentBySlot[slot];
  }

  fragmentOf(key: Uint8Array): number {
    return this.fragmentBySlot[slotOf(key)];
  }
}

/** The half-open slot range [first, end) of fragment `f` of `fragmentCount`. */
export function slotRange(f: number, fragmentCount: number): [number, number] {
  return [Math.floor((f * SLOT_COUNT) / fragmentCount), Math.floor(((f + 1) * SLOT_COUNT) / fragmentCount)];
}
