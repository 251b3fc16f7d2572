// Bit commands on string values: SETBIT, GETBIT, BITCOUNT, BITPOS, BITOP, BITFIELD. Each runs in
// the fragment actor that owns the key (src/core/modify.ts, bits.ts, bitfield.ts), so it orders with
// every other command on that key and a count over a large value never runs on the main thread.
// Arguments Redis checks before it looks the key up are checked here; the rest travel with the
// operation.

import {
  BITFIELD_OP_BYTES,
  type BitfieldOp,
  BitfieldOpcode,
  encodeBitfieldOps,
  Overflow,
} from '../../core/bitfield.js';
import {
  BIT_ARGS_KEPT,
  BIT_OFFSET_MAX,
  BIT_OPERATION_NAMES,
  BitOperation,
  encodeBitArgs,
} from '../../core/bits.js';
import { parseInt64 } from '../../core/int64.js';
import { encodeKeys, Modifier } from '../../core/modify.js';
import type { RespCommand } from '../../core/resp-parser.js';
import type { RespWriter } from '../../core/resp-writer.js';
import { MODIFY_OPERAND_BYTES_MAX } from '../../threads/op-codec.js';
import {
  type CommandSpec,
  integerArg,
  NOT_INTEGER,
  optionName,
  replyError,
  SYNTAX_ERROR,
} from './commands.js';
import type { RespConnection } from './connection.js';
import { keyFits, keysInOneSlot, ModifyMode, modifyKey } from './key-access.js';

const BAD_OFFSET = 'bit offset is not an integer or out of range';
const BAD_BIT = 'bit is not an integer or out of range';

/** The bit offset in argument `i`, or undefined (with Redis's error written) when it is not one. */
function offsetArg(cmd: RespCommand, i: number, w: RespWriter): number | undefined {
  const offset = integerArg(cmd, i);
  if (offset !== undefined && offset >= 0 && offset <= BIT_OFFSET_MAX) return offset;
  w.error(BAD_OFFSET);
  return undefined;
}

/** SETBIT key offset 0|1: answers the bit's old value. */
function setbit(conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean {
  const key = cmd.arg(1);
  if (!keyFits(key, w)) return true;
  const offset = offsetArg(cmd, 2, w);
  if (offset === undefined) return true;
  const bit = integerArg(cmd, 3);
  if (bit !== 0 && bit !== 1) {
    w.error(BAD_BIT);
    return true;
  }
  modifyKey(conn, key, Modifier.SetBit, bit, undefined, 0, ModifyMode.Integer, offset);
  return false;
}

/** GETBIT key offset */
function getbit(conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean {
  const key = cmd.arg(1);
  if (!keyFits(key, w)) return true;
  const offset = offsetArg(cmd, 2, w);
  if (offset === undefined) return true;
  modifyKey(conn, key, Modifier.GetBit, 0, undefined, 0, ModifyMode.Integer, offset);
  return false;
}

/** BITCOUNT key [start end [BYTE | BIT]] and BITPOS key bit [start [end [BYTE | BIT]]]. */
function withRange(modifier: typeof Modifier.BitCount | typeof Modifier.BitPos) {
  return (conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean => {
    const key = cmd.arg(1);
    if (!keyFits(key, w)) return true;
    // Only the first few arguments matter (and how many there are): the rest are not copied.
    const args: Uint8Array[] = [];
    for (let i = 2; i < Math.min(cmd.argc, 2 + BIT_ARGS_KEPT); i++) args.push(cmd.arg(i));
    modifyKey(conn, key, modifier, 0, undefined, 0, ModifyMode.Integer, 0, encodeBitArgs(args, cmd.argc - 2));
    return false;
  };
}

/**
 * BITOP AND | OR | XOR | NOT destkey key [key …]: every key in one hash slot, so the destination's
 * fragment actor reads the sources and writes the result in one step.
 */
function bitop(conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean {
  const keys = keysInOneSlot(cmd, 2, cmd.argc, w);
  if (keys === undefined) return true;
  const [destination, ...sources] = keys;
  const operation = BIT_OPERATION_NAMES[optionName(cmd, 1)];
  if (operation === undefined) return replyError(w, SYNTAX_ERROR);
  if (operation === BitOperation.Not && sources.length !== 1)
    return replyError(w, 'BITOP NOT must be called with a single source key.');
  const operand = encodeKeys(sources);
  if (operand.length > MODIFY_OPERAND_BYTES_MAX) {
    w.error(`BITOP takes at most ${MODIFY_OPERAND_BYTES_MAX} bytes of source keys`);
    return true;
  }
  modifyKey(conn, destination, Modifier.BitOp, operation, undefined, 0, ModifyMode.Integer, 0, operand);
  return false;
}

const BAD_TYPE =
  'Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is.';
/** Subcommands one BITFIELD may carry: each takes BITFIELD_OP_BYTES of the operand. */
const BITFIELD_OPS_MAX = Math.floor(MODIFY_OPERAND_BYTES_MAX / BITFIELD_OP_BYTES);
const OVERFLOWS: Readonly<Record<string, Overflow>> = {
  WRAP: Overflow.Wrap,
  SAT: Overflow.Sat,
  FAIL: Overflow.Fail,
};

/**
 * BITFIELD key [GET type offset] [SET type offset value] [INCRBY type offset increment]
 * [OVERFLOW WRAP | SAT | FAIL] …, and BITFIELD_RO (GET only). Every error Redis reports comes
 * before it reads the key, so all are found here; the actor runs the subcommands.
 */
function bitfield(readOnlyCommand: boolean) {
  return (conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean => {
    const key = cmd.arg(1);
    if (!keyFits(key, w)) return true;
    const ops: BitfieldOp[] = [];
    let overflow: Overflow = Overflow.Wrap;
    for (let j = 2; j < cmd.argc; j++) {
      const more = cmd.argc - j - 1;
      const sub = optionName(cmd, j);
      let opcode: BitfieldOpcode;
      if (sub === 'GET' && more >= 2) opcode = BitfieldOpcode.Get;
      else if (sub === 'SET' && more >= 3) opcode = BitfieldOpcode.Set;
      else if (sub === 'INCRBY' && more >= 3) opcode = BitfieldOpcode.IncrBy;
      else if (sub === 'OVERFLOW' && more >= 1) {
        const kind = OVERFLOWS[optionName(cmd, ++j)];
        if (kind === undefined) return replyError(w, 'Invalid OVERFLOW type specified');
        overflow = kind;
        continue;
      } else return replyError(w, SYNTAX_ERROR);
      const type = fieldType(cmd.arg(j + 1));
      if (type === undefined) return replyError(w, BAD_TYPE);
      const offset = fieldOffset(cmd.arg(j + 2), type.bits);
      if (offset === undefined) return replyError(w, BAD_OFFSET);
      let operand = 0n;
      if (opcode !== BitfieldOpcode.Get) {
        const n = parseInt64(cmd.arg(j + 3));
        if (n === undefined) return replyError(w, NOT_INTEGER);
        operand = n;
      }
      ops.push({ opcode, signed: type.signed, bits: type.bits, offset, overflow, operand });
      j += opcode === BitfieldOpcode.Get ? 2 : 3;
    }
    if (readOnlyCommand && ops.some((op) => op.opcode !== BitfieldOpcode.Get))
      return replyError(w, 'BITFIELD_RO only supports the GET subcommand');
    if (ops.length > BITFIELD_OPS_MAX)
      return replyError(w, `BITFIELD takes at most ${BITFIELD_OPS_MAX} subcommands`);
    const mode = ModifyMode.BitfieldAnswers;
    modifyKey(conn, key, Modifier.Bitfield, 0, undefined, 0, mode, 0, encodeBitfieldOps(ops));
    return false;
  };
}

/** `i1`…`i64` or `u1`…`u63` (lower-case letter, as Redis reads it); undefined otherwise. */
function fieldType(arg: Uint8Array): { signed: boolean; bits: number } | undefined {
  if (arg[0] !== 0x69 && arg[0] !== 0x75) return undefined;
  const signed = arg[0] === 0x69;
  const bits = parseInt64(arg.subarray(1));
  if (bits === undefined || bits < 1n || bits > (signed ? 64n : 63n)) return undefined;
  return { signed, bits: Number(bits) };
}

/** A field's bit offset: a plain one, or `#n` for the n-th field of this width. */
function fieldOffset(arg: Uint8Array, bits: number): number | undefined {
  const byWidth = arg[0] === 0x23;
  let offset = parseInt64(byWidth ? arg.subarray(1) : arg);
  if (offset === undefined) return undefined;
  // Redis multiplies in 64 bits; a product that wraps is as out of range as one that does not.
  if (byWidth) offset = BigInt.asIntN(64, offset * BigInt(bits));
  return offset < 0n || offset > BigInt(BIT_OFFSET_MAX) ? undefined : Number(offset);
}

const FIRST: readonly [number, number, number] = [1, 1, 1];

export const BIT_COMMANDS: CommandSpec[] = [
  { name: 'SETBIT', arity: 4, flags: ['write', 'denyoom'], keys: FIRST, run: setbit },
  { name: 'GETBIT', arity: 3, flags: ['readonly', 'fast'], keys: FIRST, run: getbit },
  { name: 'BITCOUNT', arity: -2, flags: ['readonly'], keys: FIRST, run: withRange(Modifier.BitCount) },
  { name: 'BITPOS', arity: -3, flags: ['readonly'], keys: FIRST, run: withRange(Modifier.BitPos) },
  { name: 'BITFIELD', arity: -2, flags: ['write', 'denyoom'], keys: FIRST, run: bitfield(false) },
  { name: 'BITFIELD_RO', arity: -2, flags: ['readonly', 'fast'], keys: FIRST, run: bitfield(true) },
  { name: 'BITOP', arity: -4, flags: ['write', 'denyoom'], keys: [2, -1, 1], run: bitop },
];
