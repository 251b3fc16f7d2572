// Pub/Sub commands, as Redis 7.0 answers them: SUBSCRIBE / PSUBSCRIBE / SSUBSCRIBE and their
// UNSUBSCRIBEs (each name confirmed by a push with the connection's subscription count), PUBLISH /
// SPUBLISH (the number of local receivers) and PUBSUB. Under RESP2 a subscribed connection may run
// only the commands in ALLOWED_WHILE_SUBSCRIBED; under RESP3 it may run any.

import { latin1 } from '../../core/bytes.js';
import { PUBSUB_PAYLOAD_BYTES_MAX } from '../../core/limits.js';
import { SubscriptionKind } from '../../core/pubsub.js';
import type { RespCommand } from '../../core/resp-parser.js';
import type { RespWriter } from '../../core/resp-writer.js';
import type { CommandSpec } from './commands.js';
import { optionName, replyError, unknownSubcommand, writeHelp } from './commands.js';
import type { RespConnection } from './connection.js';
import { nodeServer } from './host.js';

/** Commands a subscribed RESP2 connection may run (Redis's processCommand). */
export const ALLOWED_WHILE_SUBSCRIBED = new Set([
  'SUBSCRIBE',
  'SSUBSCRIBE',
  'UNSUBSCRIBE',
  'SUNSUBSCRIBE',
  'PSUBSCRIBE',
  'PUNSUBSCRIBE',
  'PING',
  'QUIT',
  'RESET',
]);

/** Redis's refusal of any other command on a subscribed RESP2 connection. */
export function refuseWhileSubscribed(w: RespWriter, fullName: string): true {
  w.error(
    `Can't execute '${fullName}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context`,
  );
  return true;
}

const SUBSCRIBED = ['subscribe', 'psubscribe', 'ssubscribe'] as const;
const UNSUBSCRIBED = ['unsubscribe', 'punsubscribe', 'sunsubscribe'] as const;

/** The count a confirmation carries: channels and patterns, or shard channels alone. */
function countOf(conn: RespConnection, kind: SubscriptionKind): number {
  return kind === SubscriptionKind.Shard ? conn.subscriptions.shardCount : conn.subscriptions.count;
}

function confirm(
  conn: RespConnection,
  w: RespWriter,
  what: string,
  name: Uint8Array | null,
  kind: SubscriptionKind,
) {
  w.pushHeader(3);
  w.bulk(what);
  if (name === null) w.null();
  else w.bulk(name);
  w.integer(countOf(conn, kind));
}

function subscribe(kind: SubscriptionKind) {
  return (conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean => {
    const registry = nodeServer(conn).node.pubsub.registry;
    for (let i = 1; i < cmd.argc; i++) {
      const name = cmd.arg(i);
      registry.subscribe(conn, kind, latin1(name));
      confirm(conn, w, SUBSCRIBED[kind], name, kind);
    }
    conn.pubsubMode = true;
    conn.markPushed(w);
    return true;
  };
}

/** Unsubscribes the names given, or every one of the kind; a confirmation per name (one with nil for none). */
function unsubscribe(kind: SubscriptionKind) {
  return (conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean => {
    const registry = nodeServer(conn).node.pubsub.registry;
    const what = UNSUBSCRIBED[kind];
    if (cmd.argc > 1) {
      for (let i = 1; i < cmd.argc; i++) {
        registry.unsubscribe(conn, kind, latin1(cmd.arg(i)));
        confirm(conn, w, what, cmd.arg(i), kind);
      }
    } else {
      const names = [...conn.subscriptions.names[kind]];
      if (names.length === 0) confirm(conn, w, what, null, kind);
      for (const name of names) {
        registry.unsubscribe(conn, kind, name);
        confirm(conn, w, what, Buffer.from(name, 'latin1'), kind);
      }
    }
    if (conn.subscriptions.total === 0) conn.pubsubMode = false;
    conn.markPushed(w);
    return true;
  };
}

function publish(shard: boolean) {
  return (conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean => {
    const channel = cmd.arg(1);
    const message = cmd.arg(2);
    if (channel.length + message.length > PUBSUB_PAYLOAD_BYTES_MAX) {
      return replyError(w, `channel and message exceed ${PUBSUB_PAYLOAD_BYTES_MAX} bytes`);
    }
    w.integer(nodeServer(conn).node.pubsub.publish(shard, channel, message));
    return true;
  };
}

const PUBSUB_HELP = [
  'PUBSUB <subcommand> [<arg> [value] [opt] ...]. Subcommands are:',
  'CHANNELS [<pattern>]',
  "    Return the currently active channels matching a <pattern> (default: '*').",
  'NUMPAT',
  '    Return number of subscriptions to patterns.',
  'NUMSUB [<channel> ...]',
  '    Return the number of subscribers for the specified channels, excluding',
  '    pattern subscriptions(default: no channels).',
  'SHARDCHANNELS [<pattern>]',
  "    Return the currently active shard level channels matching a <pattern> (default: '*').",
  'SHARDNUMSUB [<shardchannel> ...]',
  '    Return the number of subscribers for the specified shard level channel(s)',
  'HELP',
  '    Prints this help.',
];

/** PUBSUB CHANNELS | SHARDCHANNELS [pattern], NUMSUB | SHARDNUMSUB [channel …], NUMPAT, HELP. */
function pubsub(conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean {
  const registry = nodeServer(conn).node.pubsub.registry;
  const sub = optionName(cmd, 1);
  switch (sub) {
    case 'CHANNELS':
    case 'SHARDCHANNELS': {
      if (cmd.argc > 3) {
        return replyError(
          w,
          `unknown subcommand or wrong number of arguments for '${cmd.arg(1).toString('latin1')}'. Try PUBSUB HELP.`,
        );
      }
      const kind = sub === 'CHANNELS' ? SubscriptionKind.Channel : SubscriptionKind.Shard;
      const names = registry.activeChannels(kind, cmd.argc === 3 ? cmd.arg(2) : undefined);
      w.arrayHeader(names.length);
      for (const name of names) w.bulk(Buffer.from(name, 'latin1'));
      return true;
    }
    case 'NUMSUB':
    case 'SHARDNUMSUB': {
      const kind = sub === 'NUMSUB' ? SubscriptionKind.Channel : SubscriptionKind.Shard;
      w.arrayHeader((cmd.argc - 2) * 2);
      for (let i = 2; i < cmd.argc; i++) {
        w.bulk(cmd.arg(i));
        w.integer(registry.subscriberCount(kind, latin1(cmd.arg(i))));
      }
      return true;
    }
    case 'NUMPAT':
      if (cmd.argc !== 2) return replyError(w, "wrong number of arguments for 'pubsub|numpat' command");
      w.integer(registry.patternCount);
      return true;
    case 'HELP':
      if (cmd.argc !== 2) return replyError(w, "wrong number of arguments for 'pubsub|help' command");
      return writeHelp(w, PUBSUB_HELP);
    default:
      return unknownSubcommand(w, cmd, 'PUBSUB');
  }
}

const NONE = [0, 0, 0] as const;
const ALL = [1, -1, 1] as const;
const SUBSCRIBING = ['pubsub', 'noscript', 'loading', 'stale'];
const PUBLISHING = ['pubsub', 'loading', 'stale', 'fast'];

export const PUBSUB_COMMANDS: readonly CommandSpec[] = [
  {
    name: 'SUBSCRIBE',
    arity: -2,
    flags: SUBSCRIBING,
    needs: 'session',
    keys: NONE,
    run: subscribe(SubscriptionKind.Channel),
  },
  {
    name: 'PSUBSCRIBE',
    arity: -2,
    flags: SUBSCRIBING,
    needs: 'session',
    keys: NONE,
    run: subscribe(SubscriptionKind.Pattern),
  },
  {
    name: 'SSUBSCRIBE',
    arity: -2,
    flags: SUBSCRIBING,
    needs: 'session',
    keys: ALL,
    run: subscribe(SubscriptionKind.Shard),
  },
  {
    name: 'UNSUBSCRIBE',
    arity: -1,
    flags: SUBSCRIBING,
    needs: 'session',
    keys: NONE,
    run: unsubscribe(SubscriptionKind.Channel),
  },
  {
    name: 'PUNSUBSCRIBE',
    arity: -1,
    flags: SUBSCRIBING,
    needs: 'session',
    keys: NONE,
    run: unsubscribe(SubscriptionKind.Pattern),
  },
  {
    name: 'SUNSUBSCRIBE',
    arity: -1,
    flags: SUBSCRIBING,
    needs: 'session',
    keys: ALL,
    run: unsubscribe(SubscriptionKind.Shard),
  },
  { name: 'PUBLISH', arity: 3, flags: PUBLISHING, keys: NONE, needs: 'node', run: publish(false) },
  { name: 'SPUBLISH', arity: 3, flags: PUBLISHING, keys: [1, 1, 1], needs: 'node', run: publish(true) },
  { name: 'PUBSUB', arity: -2, flags: [], keys: NONE, needs: 'node', run: pubsub },
];
