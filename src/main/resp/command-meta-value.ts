// How command-meta.ts stores redis-server's COMMAND INFO and COMMAND DOCS replies, keeping each
// value's RESP3 kind so they are written back byte for byte: a string is a bulk string, a number an
// integer, an array an array, `{ '~': [...] }` a set, `{ '~+': [...] }` a set of simple strings
// (flags, ACL categories), `{ '+': text }` a simple string, and any other object a map whose keys
// are bulk strings, in their order. In RESP2 maps and sets become arrays, as Redis writes them.

import type { RespWriter } from '../../core/resp-writer.js';

export type MetaValue =
  | string
  | number
  | readonly MetaValue[]
  | { readonly '~': readonly MetaValue[] }
  | { readonly '~+': readonly string[] }
  | { readonly '+': string }
  | { readonly [key: string]: MetaValue };

export function writeMetaValue(w: RespWriter, value: MetaValue): void {
  if (typeof value === 'string') return w.bulk(value);
  if (typeof value === 'number') return w.integer(value);
  if (isArray(value)) {
    w.arrayHeader(value.length);
    for (const item of value) writeMetaValue(w, item);
    return;
  }
  const set = (value as { '~'?: readonly MetaValue[] })['~'];
  const simpleSet = (value as { '~+'?: readonly string[] })['~+'];
  const simple = (value as { '+'?: string })['+'];
  if (set !== undefined) {
    w.setHeader(set.length);
    for (const item of set) writeMetaValue(w, item);
  } else if (simpleSet !== undefined) {
    w.setHeader(simpleSet.length);
    for (const item of simpleSet) w.simple(item);
  } else if (simple !== undefined) {
    w.simple(simple);
  } else {
    const entries = Object.entries(value);
    w.mapHeader(entries.length);
    for (const [key, item] of entries) {
      w.bulk(key);
      writeMetaValue(w, item);
    }
  }
}

/** The strings of a set (either kind), or of an array. */
export function metaStrings(value: MetaValue): readonly string[] {
  if (isArray(value)) return value as readonly string[];
  const v = value as { '~'?: readonly MetaValue[]; '~+'?: readonly string[] };
  return (v['~+'] ?? v['~'] ?? []) as readonly string[];
}

export function isArray(value: MetaValue): value is readonly MetaValue[] {
  return Array.isArray(value);
}
