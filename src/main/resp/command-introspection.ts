// COMMAND: what redis-cli and client libraries ask a server about its commands. COUNT, LIST [FILTERBY
// MODULE|ACLCAT|PATTERN], INFO and DOCS answer from redis-server's own metadata for the commands
// Tessera supports (command-meta.ts) and list, of each container, the subcommands Tessera implements
// (`client|list`); commands Tessera refuses and its own TESSERA.* commands are described by the
// command table alone (name, arity, flags, key positions) and have no DOCS entry.

import { globMatch } from '../../core/glob.js';
import type { RespCommand } from '../../core/resp-parser.js';
import type { RespWriter } from '../../core/resp-writer.js';
import { COMMAND_DOCS, COMMAND_INFO } from './command-meta.js';
import { isArray, type MetaValue, metaStrings, writeMetaValue } from './command-meta-value.js';
import {
  arityHolds,
  COMMANDS,
  type CommandSpec,
  findCommand,
  type KeyRange,
  lastKeyIndex,
  optionName,
  replyError,
  SYNTAX_ERROR,
  unknownSubcommand,
  writeHelp,
} from './commands.js';

/** The fields of a COMMAND INFO entry command-introspection reads. */
const INFO_NAME = 0;
const INFO_ARITY = 1;
const INFO_ACL_CATEGORIES = 6;
const INFO_SUBCOMMANDS = 9;

/** COMMAND INFO of every command and subcommand described, by lower-case full name (`client|list`). */
const INFO_BY_NAME = new Map<string, readonly MetaValue[]>();
/** COMMAND DOCS likewise. */
const DOCS_BY_NAME = new Map<string, MetaValue>();

for (const info of COMMAND_INFO as ReadonlyArray<readonly MetaValue[]>) {
  INFO_BY_NAME.set(info[INFO_NAME] as string, info);
  for (const sub of subcommandInfos(info)) INFO_BY_NAME.set(sub[INFO_NAME] as string, sub);
}
for (const [name, docs] of Object.entries(COMMAND_DOCS)) {
  DOCS_BY_NAME.set(name, docs);
  const subcommands = (docs as Record<string, MetaValue>).subcommands;
  if (subcommands !== undefined) {
    for (const [subName, subDocs] of Object.entries(subcommands)) DOCS_BY_NAME.set(subName, subDocs);
  }
}

function subcommandInfos(info: readonly MetaValue[]): ReadonlyArray<readonly MetaValue[]> {
  const subcommands = info[INFO_SUBCOMMANDS];
  // A command without subcommands has an empty set there, a container an array.
  return isArray(subcommands) ? (subcommands as ReadonlyArray<readonly MetaValue[]>) : [];
}

/** COMMAND, COMMAND COUNT / LIST / INFO [name…] / DOCS [name…] / GETKEYS / HELP. */
export function command(cmd: RespCommand, w: RespWriter): boolean {
  if (cmd.argc === 1) return writeAllInfo(w);
  const sub = optionName(cmd, 1);
  const fullName = `command|${sub.toLowerCase()}`;
  // Each subcommand's arity as Redis describes it (GETKEYS: the command's name and one argument at least).
  const arity = INFO_BY_NAME.get(fullName)?.[INFO_ARITY] as number | undefined;
  if (arity !== undefined && !arityHolds(arity, cmd.argc)) {
    return replyError(w, `wrong number of arguments for '${fullName}' command`);
  }
  switch (sub) {
    case 'COUNT':
      w.integer(COMMANDS.length);
      return true;
    case 'LIST':
      return commandList(cmd, w);
    case 'INFO':
      return commandInfo(cmd, w);
    case 'DOCS':
      return commandDocs(cmd, w);
    case 'GETKEYS':
      commandGetKeys(cmd, w);
      return true;
    case 'HELP':
      return writeHelp(w, COMMAND_HELP);
    default:
      return unknownSubcommand(w, cmd, 'COMMAND');
  }
}

const COMMAND_HELP = [
  'COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:',
  '(no subcommand)',
  '    Return details about all Redis commands.',
  'COUNT',
  '    Return the total number of commands in this Redis server.',
  'LIST',
  '    Return a list of all commands in this Redis server.',
  'INFO [<command-name> ...]',
  '    Return details about multiple Redis commands.',
  '    If no command names are given, documentation details for all',
  '    commands are returned.',
  'DOCS [<command-name> ...]',
  '    Return documentation details about multiple Redis commands.',
  '    If no command names are given, documentation details for all',
  '    commands are returned.',
  'GETKEYS <full-command>',
  '    Return the keys from a full Redis command.',
  'HELP',
  '    Prints this help.',
];

function writeAllInfo(w: RespWriter): true {
  w.arrayHeader(COMMANDS.length);
  for (const spec of COMMANDS) writeSpecInfo(w, spec);
  return true;
}

/** COMMAND INFO [name…]: each named command's (or `container|subcommand`'s) description, or null. */
function commandInfo(cmd: RespCommand, w: RespWriter): true {
  if (cmd.argc === 2) return writeAllInfo(w);
  w.arrayHeader(cmd.argc - 2);
  for (let i = 2; i < cmd.argc; i++) {
    const info = INFO_BY_NAME.get(lowerCase(cmd.arg(i)));
    const spec = info === undefined ? findCommand(cmd.arg(i)) : undefined;
    if (info !== undefined) writeMetaValue(w, info);
    else if (spec !== undefined) writeSpecInfo(w, spec);
    else w.null();
  }
  return true;
}

function writeSpecInfo(w: RespWriter, spec: CommandSpec): void {
  const info = INFO_BY_NAME.get(spec.name.toLowerCase());
  if (info !== undefined) writeMetaValue(w, info);
  else writeTableInfo(w, spec);
}

/** Redis 7's ten fields, from the command table alone: no ACL categories, tips, key specs or subcommands. */
function writeTableInfo(w: RespWriter, spec: CommandSpec): void {
  w.arrayHeader(10);
  w.bulk(spec.name.toLowerCase());
  w.integer(spec.arity);
  w.setHeader(spec.flags.length);
  for (const flag of spec.flags) w.simple(flag);
  w.integer(spec.keys[0]);
  w.integer(spec.keys[1]);
  w.integer(spec.keys[2]);
  w.setHeader(0);
  w.setHeader(0);
  w.setHeader(0);
  w.setHeader(0);
}

/** COMMAND DOCS [name…]: a map of full name → documentation; names without any are left out, as Redis does. */
function commandDocs(cmd: RespCommand, w: RespWriter): true {
  const names: string[] = [];
  if (cmd.argc === 2) {
    for (const spec of COMMANDS) names.push(spec.name.toLowerCase());
  } else {
    for (let i = 2; i < cmd.argc; i++) names.push(lowerCase(cmd.arg(i)));
  }
  const documented = names.filter((name) => DOCS_BY_NAME.has(name));
  w.mapHeader(documented.length);
  for (const name of documented) {
    w.bulk(name);
    writeMetaValue(w, DOCS_BY_NAME.get(name)!);
  }
  return true;
}

/**
 * COMMAND LIST [FILTERBY MODULE name | ACLCAT category | PATTERN glob]: every command's and
 * subcommand's full name, or those the filter keeps. As in Redis, FILTERBY must be the last three
 * arguments; MODULE keeps nothing (Tessera loads no modules), an unknown ACL category nothing, and
 * PATTERN matches the full name ignoring case.
 */
function commandList(cmd: RespCommand, w: RespWriter): true {
  let keep: (name: string, categories: readonly string[]) => boolean = () => true;
  if (cmd.argc !== 2) {
    if (cmd.argc !== 5 || optionName(cmd, 2) !== 'FILTERBY') return replyError(w, SYNTAX_ERROR);
    const filter = optionName(cmd, 3);
    if (filter === 'MODULE') keep = () => false;
    else if (filter === 'ACLCAT') {
      const category = `@${lowerCase(cmd.arg(4))}`;
      keep = (_name, categories) => categories.includes(category);
    } else if (filter === 'PATTERN') {
      const pattern = Buffer.from(lowerCase(cmd.arg(4)), 'latin1');
      keep = (name) => globMatch(pattern, Buffer.from(name, 'latin1'));
    } else return replyError(w, SYNTAX_ERROR);
  }
  const names: string[] = [];
  for (const spec of COMMANDS) {
    const name = spec.name.toLowerCase();
    const info = INFO_BY_NAME.get(name);
    if (keep(name, info === undefined ? [] : metaStrings(info[INFO_ACL_CATEGORIES]))) names.push(name);
    if (info === undefined) continue;
    for (const sub of subcommandInfos(info)) {
      const subName = sub[INFO_NAME] as string;
      if (keep(subName, metaStrings(sub[INFO_ACL_CATEGORIES]))) names.push(subName);
    }
  }
  w.arrayHeader(names.length);
  for (const name of names) w.bulk(name);
  return true;
}

/** ASCII lower case of a name's bytes, as Redis compares command names and patterns. */
function lowerCase(bytes: Uint8Array): string {
  return Buffer.from(bytes)
    .toString('latin1')
    .replace(/[A-Z]+/g, (upper) => upper.toLowerCase());
}

/** COMMAND GETKEYS command arg…: the keys the command would touch, found from its key positions. */
function commandGetKeys(cmd: RespCommand, w: RespWriter): void {
  const spec = findCommand(cmd.arg(2));
  if (spec === undefined) return void w.error('Invalid command specified');
  const sub = cmd.argc > 3 ? spec.subcommandKeys?.[optionName(cmd, 3)] : undefined;
  const range: KeyRange = sub ?? spec.keys;
  if (range[0] === 0) return void w.error('The command has no key arguments');
  // Counted without COMMAND GETKEYS in front, as the command itself would be.
  const argc = cmd.argc - 2;
  if ((spec.arity > 0 && spec.arity !== argc) || argc < -spec.arity)
    return void w.error('Invalid number of arguments specified for command');
  const [first, , step] = range;
  const end = lastKeyIndex(range, argc);
  // A subcommand's own arity is not in the table: a key position past the end is a missing argument.
  if (first > end) return void w.error('Invalid number of arguments specified for command');
  w.arrayHeader(Math.floor((end - first) / step) + 1);
  for (let i = first; i <= end; i += step) w.bulk(cmd.arg(i + 2));
}
