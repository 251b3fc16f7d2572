// CLUSTER INFO / SLOTS / SHARDS / NODES / MYID / KEYSLOT / COUNTKEYSINSLOT, READONLY and READWRITE.
// Every node answers every key (it forwards to the fragment's first serving replica), so these
// describe fragments as slot ranges with that replica as the primary, and cluster-mode clients
// (ioredis Cluster, redis-cli -c) route straight to it. A node started without peers answers as a
// Redis without cluster support does.

import { createHash } from 'node:crypto';
import { slotOf, slotRange } from '../../core/keyspace.js';
import {
  COUNT_KEYS_IN_SLOT_EXAMINED_MAX,
  COUNT_KEYS_IN_SLOT_PAGE_KEYS,
  SLOT_COUNT,
} from '../../core/limits.js';
import type { RespCommand } from '../../core/resp-parser.js';
import type { RespWriter } from '../../core/resp-writer.js';
import { workerOfFragment } from '../../native-bindings/manifest.js';
import type { Cluster, MemberHealth } from '../mesh/cluster.js';
import { decodeCursor, encodeCursor } from '../scanner.js';
import { answerLater, type CommandSpec, integerArg, unknownSubcommand, writeHelp } from './commands.js';
import type { RespConnection } from './connection.js';
import { nodeServer } from './host.js';

/** One node as clients see it. */
interface ClusterNodeView {
  /** 40 hex characters, as Redis node ids are: SHA-1 of the Tessera node id. */
  id: string;
  nodeId: string;
  host: string;
  port: number;
  self: boolean;
  /** Requests may go to it: connected and reachable to membership. */
  up: boolean;
  /** Redis's view of it: ok, `fail?` (unreachable from here), `fail` (Down: a majority agrees). */
  health: MemberHealth;
  /** A member (not Removed; not a peer that connected without joining): listed. */
  member: boolean;
}

/** One fragment as a shard: its slots, its primary (first serving replica) and the other replicas. */
interface ShardView {
  first: number;
  last: number;
  primary: ClusterNodeView | undefined;
  replicas: ClusterNodeView[];
}

export function redisNodeId(nodeId: string): string {
  return createHash('sha1').update(nodeId).digest('hex');
}

/**
 * The nodes clients see. `listed`: those CLUSTER NODES lists. `at(member, fragment)`: the node that
 * stands for `member` in the fragment's shard — with worker ports, this node's worker that owns
 * the fragment, a node of its own reached at its port (its id is the SHA-1 of `<node id>/worker-<i>`).
 */
interface NodesView {
  listed: ClusterNodeView[];
  /** The members (empty without peers), by member index. */
  members: ClusterNodeView[];
  at(member: number, fragment: number): ClusterNodeView;
}

function nodesOf(conn: RespConnection): NodesView {
  const server = nodeServer(conn);
  const node = server.node;
  const cluster = node.cluster;
  const members = cluster === undefined ? [] : memberNodes(conn, cluster);
  const ownPorts = server.workerPorts;
  const endpoints = cluster?.clientEndpoints() ?? [];
  // Per member, the nodes its workers stand as (undefined: it serves on its main port only).
  const workersOf = (member: number): ClusterNodeView[] | undefined => {
    const self = cluster === undefined || member === cluster.config.selfIndex;
    const ports = self ? ownPorts : endpoints[member]?.workerPorts;
    if (ports === undefined || ports.length === 0) return undefined;
    const nodeId = self ? node.nodeId : cluster!.config.members[member];
    const view = self ? undefined : members[member];
    return ports.map((port, i) => {
      const id = `${nodeId}/worker-${i}`;
      return {
        id: redisNodeId(id),
        nodeId: id,
        host: self ? server.workerPortsHost : endpoints[member].host,
        port,
        self: self && conn.relayedFromWorker === i,
        up: view === undefined ? port !== 0 : view.up && port !== 0,
        health: view?.health ?? 'ok',
        member: view?.member ?? true,
      };
    });
  };
  if (cluster === undefined) {
    const workers = workersOf(0)!;
    return { listed: workers, members, at: (_, f) => workers[node.dispatcher.workerLinkOf(f).index] };
  }
  const workers = members.map((_, m) => workersOf(m));
  const groups = endpoints.map((e, m) =>
    m === cluster.config.selfIndex ? node.dispatcher.groupCount : e.workerGroups,
  );
  return {
    listed: members.flatMap((n, m) => workers[m] ?? [n]),
    members,
    at: (m, f) => {
      const own = workers[m];
      return own === undefined ? members[m] : own[workerOfFragment(f, groups[m], own.length)];
    },
  };
}

function memberNodes(conn: RespConnection, cluster: Cluster): ClusterNodeView[] {
  const { port } = nodeServer(conn).address;
  const c = cluster.config;
  return c.members.map((nodeId, m) => {
    const self = m === c.selfIndex;
    return {
      id: redisNodeId(nodeId),
      nodeId,
      host: self ? c.clientHost : (c.addresses[m]?.host ?? ''),
      port: self ? port : cluster.mesh.clientPortOf(m),
      self,
      up: self || cluster.isUp(m),
      health: cluster.memberHealth(m),
      member: cluster.isMember(m),
    };
  });
}

function shardsOf(conn: RespConnection, nodes: NodesView): ShardView[] {
  const fragments = conn.server.settings.fragments;
  const out: ShardView[] = [];
  const cluster = nodeServer(conn).node.cluster;
  for (let f = 0; f < fragments; f++) {
    const [first, end] = slotRange(f, fragments);
    if (cluster === undefined) {
      // Worker ports without peers: each fragment's primary is the worker that owns it.
      const primary = nodes.at(0, f);
      out.push({ first, last: end - 1, primary: primary.up ? primary : undefined, replicas: [] });
      continue;
    }
    const serving = cluster.servingMember(f);
    const replicas = cluster
      .replicasOf(f)
      .filter((m) => m !== serving && nodes.members[m].up && nodes.members[m].port > 0)
      .map((m) => nodes.at(m, f));
    out.push({ first, last: end - 1, primary: serving === -1 ? undefined : nodes.at(serving, f), replicas });
  }
  return out;
}

function writeEndpoint(w: RespWriter, n: ClusterNodeView): void {
  w.arrayHeader(3);
  w.bulk(n.host);
  w.integer(n.port);
  w.bulk(n.id);
}

function clusterSlots(conn: RespConnection, w: RespWriter): void {
  const shards = shardsOf(conn, nodesOf(conn)).filter((s) => s.primary !== undefined);
  w.arrayHeader(shards.length);
  for (const s of shards) {
    w.arrayHeader(3 + s.replicas.length);
    w.integer(s.first);
    w.integer(s.last);
    writeEndpoint(w, s.primary!);
    for (const r of s.replicas) writeEndpoint(w, r);
  }
}

function clusterShards(conn: RespConnection, w: RespWriter): void {
  const shards = shardsOf(conn, nodesOf(conn));
  w.arrayHeader(shards.length);
  for (const s of shards) {
    const members = [...(s.primary === undefined ? [] : [s.primary]), ...s.replicas];
    w.mapHeader(2);
    w.bulk('slots');
    w.arrayHeader(2);
    w.integer(s.first);
    w.integer(s.last);
    w.bulk('nodes');
    w.arrayHeader(members.length);
    for (const n of members) {
      w.mapHeader(7);
      w.bulk('id');
      w.bulk(n.id);
      w.bulk('port');
      w.integer(n.port);
      w.bulk('ip');
      w.bulk(n.host);
      w.bulk('endpoint');
      w.bulk(n.host);
      w.bulk('role');
      w.bulk(n === s.primary ? 'master' : 'replica');
      w.bulk('replication-offset');
      w.integer(0);
      w.bulk('health');
      w.bulk(n.up ? 'online' : 'failed');
    }
  }
}

/** CLUSTER NODES flags: PFAIL is this node's own view, FAIL the majority's (Down). */
const FAIL_FLAGS: Record<MemberHealth, string> = { ok: '', pfail: 'fail?', fail: 'fail' };

function clusterNodes(conn: RespConnection): string {
  const nodes = nodesOf(conn);
  const shards = shardsOf(conn, nodes);
  const lines: string[] = [];
  for (const n of nodes.listed) {
    if (!n.member) continue;
    const ranges = shards
      .filter((s) => s.primary === n)
      .map((s) => (s.first === s.last ? `${s.first}` : `${s.first}-${s.last}`));
    const flags = [n.self ? 'myself' : '', 'master', FAIL_FLAGS[n.health]].filter((x) => x !== '').join(',');
    const link = n.up ? 'connected' : 'disconnected';
    lines.push(
      `${n.id} ${n.host}:${n.port}@0,${n.nodeId} ${flags} - 0 0 1 ${link}${ranges.map((r) => ` ${r}`).join('')}`,
    );
  }
  return `${lines.join('\n')}\n`;
}

function clusterInfo(conn: RespConnection): string {
  const nodes = nodesOf(conn);
  const shards = shardsOf(conn, nodes);
  const cluster = nodeServer(conn).node.cluster;
  let slotsOk = 0;
  for (const s of shards) if (s.primary !== undefined) slotsOk += s.last - s.first + 1;
  // Redis's cluster_size: the masters serving at least one slot (here, first serving replicas).
  const primaries = new Set(shards.map((s) => s.primary?.id).filter((id) => id !== undefined));
  const rows: Array<[string, string | number]> = [
    ['cluster_enabled', 1],
    ['cluster_state', cluster === undefined ? (slotsOk === SLOT_COUNT ? 'ok' : 'fail') : cluster.state()],
    ['cluster_slots_assigned', SLOT_COUNT],
    ['cluster_slots_ok', slotsOk],
    ['cluster_slots_pfail', 0],
    ['cluster_slots_fail', SLOT_COUNT - slotsOk],
    ['cluster_known_nodes', nodes.listed.filter((n) => n.member).length],
    ['cluster_size', primaries.size],
    // Redis's config epochs: here the assignment table's epoch, which each coordinator takeover raises.
    ['cluster_current_epoch', Math.max(1, cluster?.coordinator?.table.epoch ?? 0)],
    ['cluster_my_epoch', Math.max(1, cluster?.coordinator?.table.epoch ?? 0)],
    ['tessera_fragments', shards.length],
    ['tessera_replicas', cluster?.config.replicas ?? 1],
  ];
  return rows.map(([k, v]) => `${k}:${v}\r\n`).join('');
}

/** Counts the keys of one slot by walking its fragment (keys only), answering into a reply slot. */
function countKeysInSlot(conn: RespConnection, slot: number): false {
  const node = nodeServer(conn).node;
  const fragment = node.dispatcher.keyspace.fragmentOfSlot(slot);
  const count = async (): Promise<number> => {
    let n = 0;
    let examined = 0;
    let cursor: string | undefined = encodeCursor(fragment, undefined);
    while (cursor !== undefined && decodeCursor(cursor).fragment === fragment) {
      const page = await node.scan({ cursor, limit: COUNT_KEYS_IN_SLOT_PAGE_KEYS, keysOnly: true });
      for (const e of page.entries) if (slotOf(e.key) === slot) n++;
      examined += page.entries.length;
      if (examined > COUNT_KEYS_IN_SLOT_EXAMINED_MAX) {
        throw new Error(
          `COUNTKEYSINSLOT examines at most ${COUNT_KEYS_IN_SLOT_EXAMINED_MAX} keys of a fragment`,
        );
      }
      cursor = page.cursor;
    }
    return n;
  };
  return answerLater(conn, count(), (w, n) => w.integer(n));
}

const HELP = [
  'CLUSTER <subcommand> [<arg> [value] [opt] ...]. Subcommands are:',
  'INFO',
  '    Return information about the cluster.',
  'SLOTS',
  '    Return the slot ranges (one per fragment) and the nodes that serve them.',
  'SHARDS',
  '    Return each fragment as a shard with its replicas.',
  'NODES',
  '    Return the members in Redis CLUSTER NODES format.',
  'MYID',
  "    Return this node's id (SHA-1 of its Tessera node id).",
  'KEYSLOT <key>',
  '    Return the hash slot of <key>.',
  'COUNTKEYSINSLOT <slot>',
  '    Return the number of keys in <slot>.',
  'HELP',
  '    Print this help.',
];

/** A node started without peers answers cluster commands as Redis without cluster support. */
function clusterDisabled(conn: RespConnection, w: RespWriter): boolean {
  const server = nodeServer(conn);
  if (server.node.cluster !== undefined || server.workerPorts !== undefined) return false;
  w.error('This instance has cluster support disabled');
  return true;
}

function cluster(conn: RespConnection, cmd: RespCommand, w: RespWriter): boolean {
  const sub = cmd.arg(1).toString('latin1').toUpperCase();
  if (sub !== 'HELP' && clusterDisabled(conn, w)) return true;
  const wrongArity = () => w.error(`wrong number of arguments for 'cluster|${sub.toLowerCase()}' command`);
  switch (sub) {
    case 'INFO':
      if (cmd.argc !== 2) wrongArity();
      else w.verbatim(clusterInfo(conn));
      return true;
    case 'SLOTS':
      if (cmd.argc !== 2) wrongArity();
      else clusterSlots(conn, w);
      return true;
    case 'SHARDS':
      if (cmd.argc !== 2) wrongArity();
      else clusterShards(conn, w);
      return true;
    case 'NODES':
      if (cmd.argc !== 2) wrongArity();
      else w.verbatim(clusterNodes(conn));
      return true;
    case 'MYID':
      if (cmd.argc !== 2) wrongArity();
      else w.bulk(nodesOf(conn).listed.find((n) => n.self)?.id ?? redisNodeId(nodeServer(conn).node.nodeId));
      return true;
    case 'KEYSLOT':
      if (cmd.argc !== 3) wrongArity();
      else w.integer(slotOf(cmd.arg(2)));
      return true;
    case 'COUNTKEYSINSLOT': {
      if (cmd.argc !== 3) {
        wrongArity();
        return true;
      }
      const slot = integerArg(cmd, 2);
      if (slot === undefined || slot < 0 || slot >= SLOT_COUNT) {
        w.error('Invalid slot');
        return true;
      }
      return countKeysInSlot(conn, slot);
    }
    case 'HELP':
      return writeHelp(w, HELP);
    default:
      return unknownSubcommand(w, cmd, 'CLUSTER');
  }
}

/** READONLY: reads of fragments this node holds a copy of are served from that copy (maybe stale). */
function readOnly(conn: RespConnection, _cmd: RespCommand, w: RespWriter): boolean {
  if (clusterDisabled(conn, w)) return true;
  conn.readReplica = true;
  w.simple('OK');
  return true;
}

function readWrite(conn: RespConnection, _cmd: RespCommand, w: RespWriter): boolean {
  conn.readReplica = false;
  w.simple('OK');
  return true;
}

const NONE = [0, 0, 0] as const;

export const CLUSTER_COMMANDS: readonly CommandSpec[] = [
  { name: 'CLUSTER', arity: -2, flags: [], keys: NONE, needs: 'node', run: cluster },
  { name: 'READONLY', arity: 1, flags: ['fast'], keys: NONE, needs: 'node', run: readOnly },
  { name: 'READWRITE', arity: 1, flags: ['fast'], keys: NONE, run: readWrite },
];
