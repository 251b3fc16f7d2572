// The admin port's changes to the cluster (DESIGN.md "Operators"): POST requests with a JSON body,
// guarded by --admin-token, answered with datum's status names as objects ({status, message}, plus
// the result), never as text a client would parse.
//
//   POST /cluster/plan    {"action": "now"|"join"|"leave"|"remove", "node": id}: the moves the
//                         planner would make (dry run; nothing changes)
//   POST /cluster/remove  {"node": id}: removes a Down member, as `nodetool removenode`; membership
//                         gossips it, and the member is refused from then on until wiped
//   POST /cluster/leave   graceful leave of this node: Leaving, its replicas handed over, then it
//                         exits the cluster; {"cancel": true}: cancels it while the node is Leaving
//   POST /cluster/move    {"fragment": n, "to": id}: pins the fragment to a member (datum's Pinned);
//                         the planner moves a replica there and keeps it there while it is eligible
//
// plan, remove and move are the coordinator's decisions: a node that is not the coordinator checks
// the token, then forwards the change over the peer mesh (mesh/admin-exchange.ts; the token does not
// travel) and answers what the coordinator answered, status unchanged, with `executedBy` naming the
// node that executed it and `forwardedTo` the coordinator asked. The coordinator executes forwarded
// changes with the same function as its own (executeChange), and never forwards one again: a node
// that is not the coordinator when a forwarded change arrives answers Conflict naming the one it
// believes in. leave is about the node that received it and stays there.
//
// Every change needs `Authorization: Bearer <token>`; without a configured token every change is
// refused (Unauthorized), and a node does not start with its admin port on a non-loopback address
// without one (main.ts).

import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { setTimeout as delay } from 'node:timers/promises';
import { type PlanQuestion, previewPlan, rankForPlanning } from '../../core/coordinator.js';
import {
  ADMIN_BODY_BYTES_MAX,
  ADMIN_FORWARD_DEADLINE_MS,
  RENDEZVOUS_SLICE_PAUSE_MS,
  RENDEZVOUS_WEIGHS_PER_SLICE,
} from '../../core/limits.js';
import { isValidNodeId } from '../../core/membership-types.js';
import type { AdminAnswer, AdminRequest, AdminStatus } from '../../threads/admin-wire.js';
import type { Tessera } from '../node.js';
import type { RespServer } from '../resp/server.js';
import { localSample } from './cluster-metrics.js';

/** datum's DCP status names, as every admin change answers them. */
export type ChangeStatus = AdminStatus;

export const HTTP_STATUS_OF: Record<ChangeStatus, number> = {
  Ok: 200,
  BadRequest: 400,
  Unauthorized: 401,
  NotFound: 404,
  Conflict: 409,
  Failed: 500,
  DeadlineExceeded: 504,
};

export interface ChangeAnswer {
  status: ChangeStatus;
  message: string;
  [result: string]: unknown;
}

export const CLUSTER_CHANGE_PATHS: ReadonlySet<string> = new Set([
  '/cluster/plan',
  '/cluster/remove',
  '/cluster/leave',
  '/cluster/move',
]);

/** The changes the coordinator decides: any node forwards them to it. */
const COORDINATOR_CHANGE_PATHS: ReadonlySet<string> = new Set([
  '/cluster/plan',
  '/cluster/remove',
  '/cluster/move',
]);

/** Whether `header` (an Authorization header) carries `token`; constant time in the token's content. */
export function tokenMatches(token: string | undefined, header: string | undefined): boolean {
  if (token === undefined || header === undefined || !header.startsWith('Bearer ')) return false;
  const digest = (text: string) => createHash('sha256').update(text, 'utf8').digest();
  return timingSafeEqual(digest(header.slice('Bearer '.length)), digest(token));
}

/** Answers one change request (the caller has checked the method and the path). */
export async function clusterChange(
  node: Tessera,
  path: string,
  req: IncomingMessage,
  token: string | undefined,
): Promise<ChangeAnswer> {
  if (token === undefined) {
    return refuse('Unauthorized', 'this node has no --admin-token: cluster changes are refused');
  }
  if (!tokenMatches(token, req.headers.authorization)) {
    return refuse('Unauthorized', 'missing or wrong admin token (Authorization: Bearer <token>)');
  }
  const body = await readBody(req);
  if (typeof body === 'string') return refuse('BadRequest', body);
  const cluster = node.cluster;
  if (cluster === undefined) return refuse('Conflict', 'this node has no peers');
  if (!COORDINATOR_CHANGE_PATHS.has(path)) return executeHere(node, path, body);
  const driver = cluster.coordinator;
  if (driver === undefined) return refuse('Conflict', 'the node is starting');
  if (driver.role === 'coordinator') return executeHere(node, path, body);
  const coordinator = driver.coordinator?.id;
  if (coordinator === undefined) {
    return refuse(
      'Failed',
      'no coordinator is known (no member is Up and reachable, or none reaches a majority); try again once one is',
    );
  }
  if (coordinator === node.nodeId) {
    return refuse(
      'Failed',
      `this node names itself coordinator but does not act as one yet (${driver.role}); try again once it has taken over`,
    );
  }
  const answer = await cluster.admin.ask(
    coordinator,
    { kind: 'change', path, body },
    ADMIN_FORWARD_DEADLINE_MS,
    `the coordinator ${coordinator}`,
  );
  return { ...answer.result, status: answer.status, message: answer.message, forwardedTo: coordinator };
}

/**
 * Serves an admin request a peer asked of this node: a change forwarded to it as the coordinator
 * (executed as this node's own changes are, never forwarded again), its metrics sample, or its
 * part in a fragment's handover or in absorbing a copy handed over.
 */
export async function servePeerRequest(
  node: Tessera,
  from: string,
  request: AdminRequest,
  resp: RespServer | undefined,
): Promise<AdminAnswer> {
  if (request.kind === 'metrics') return localSample(node, resp);
  if (request.kind === 'handover' || request.kind === 'absorb') {
    const cluster = node.cluster;
    if (cluster === undefined) return { status: 'Failed', message: 'not in a cluster', result: {} };
    return request.kind === 'handover'
      ? cluster.serveHandover(from, request.fragment, request.generation, request.continuity)
      : cluster.serveAbsorb(from, request.fragment, request.generation, request.verifiedSuffices);
  }
  const answer = await servePeerChange(node, request.path, request.body);
  const { status, message, ...result } = answer;
  return { status, message, result };
}

/** Lets `node` serve its peers' admin requests; `resp`, when the node has one, adds its counters to the sample. */
export function servePeerRequests(node: Tessera, resp: RespServer | undefined): void {
  const admin = node.cluster?.admin;
  if (admin !== undefined) admin.handler = (from, request) => servePeerRequest(node, from, request, resp);
}

async function servePeerChange(
  node: Tessera,
  path: string,
  body: Record<string, unknown>,
): Promise<ChangeAnswer> {
  if (!COORDINATOR_CHANGE_PATHS.has(path))
    return refuse('BadRequest', `${path} is not a change the coordinator makes`);
  return coordinatorRefusal(node) ?? executeHere(node, path, body);
}

/** Undefined while this node acts as the coordinator; else the Conflict naming the one it believes in. */
function coordinatorRefusal(node: Tessera): ChangeAnswer | undefined {
  const driver = node.cluster?.coordinator;
  if (driver === undefined) return refuse('Conflict', 'the node is starting');
  if (driver.role === 'coordinator') return undefined;
  const believed = driver.coordinator?.id;
  const role =
    driver.role === 'taking-over' ? 'is still taking over as coordinator' : 'is not the coordinator';
  return {
    status: 'Conflict',
    message: `node ${node.nodeId} ${role}; ${believed === undefined ? 'it knows no coordinator' : `it names ${believed}`}`,
    coordinator: believed ?? null,
  };
}

async function executeHere(
  node: Tessera,
  path: string,
  body: Record<string, unknown>,
): Promise<ChangeAnswer> {
  return { ...(await executeChange(node, path, body)), executedBy: node.nodeId };
}

/**
 * Executes a change on this node: the one place a change is carried out, whether it was posted
 * here or forwarded by a peer (the caller has decided it belongs here).
 */
export async function executeChange(
  node: Tessera,
  path: string,
  body: Record<string, unknown>,
): Promise<ChangeAnswer> {
  const cluster = node.cluster;
  if (cluster === undefined) return refuse('Conflict', 'this node has no peers');
  switch (path) {
    case '/cluster/plan': {
      const question = planQuestion(body);
      if (typeof question === 'string') return refuse('BadRequest', question);
      const coordinator = cluster.coordinator;
      if (coordinator === undefined) return refuse('Conflict', 'the node is starting');
      const view = cluster.coordinatorView();
      // A node that never ranked these members (one that is not the coordinator) ranks them in
      // slices first, as the coordinator does: in one go it would hold the main thread for seconds
      // at 16 384 fragments and 1 000 members. The question's member changes that by one at most.
      while (!rankForPlanning(coordinator.table, view, cluster.config.replicas, RENDEZVOUS_WEIGHS_PER_SLICE))
        await delay(RENDEZVOUS_SLICE_PAUSE_MS);
      const preview = previewPlan(coordinator.table, view, cluster.config.replicas, question);
      if ('status' in preview) return refuse(preview.status, preview.message);
      return {
        status: 'Ok',
        message: `${preview.changes.length} fragments would change, ${preview.replicaMoves} replica copies would move`,
        question,
        tableEpoch: coordinator.table.epoch,
        replicaMoves: preview.replicaMoves,
        changes: preview.changes,
        firstWave: preview.plan.moves.map((m) => ({
          fragment: m.fragment,
          source: m.source,
          target: m.target,
          reason: m.reason,
        })),
        blocked: preview.plan.blocked,
      };
    }
    case '/cluster/remove': {
      const nodeId = body.node;
      if (!isValidNodeId(nodeId)) return refuse('BadRequest', 'body must be {"node": "<member id>"}');
      const membership = cluster.membership;
      if (membership === undefined) return refuse('Conflict', 'the node is starting');
      const reply = await membership.remove(nodeId);
      return { status: reply.status, message: reply.message, node: nodeId };
    }
    case '/cluster/leave': {
      if (body.cancel !== undefined && body.cancel !== true && body.cancel !== false)
        return refuse('BadRequest', 'body must be {} or {"cancel": true}');
      if (body.cancel === true) {
        const cancelled = await cluster.cancelLeave();
        return {
          status: cancelled.status,
          message:
            cancelled.status === 'Ok'
              ? `${node.nodeId} is Up again: its leave is cancelled (replicas already moved stay moved)`
              : cancelled.message,
          node: node.nodeId,
        };
      }
      const reply = await cluster.leave();
      return {
        status: reply.status,
        message:
          reply.status === 'Ok'
            ? `${node.nodeId} is Leaving: its replicas move to other members, then it exits the cluster`
            : reply.message,
        node: node.nodeId,
      };
    }
    case '/cluster/move': {
      const { fragment, to } = body;
      if (typeof fragment !== 'number' || !isValidNodeId(to))
        return refuse('BadRequest', 'body must be {"fragment": <number>, "to": "<member id>"}');
      const coordinator = cluster.coordinator;
      if (coordinator === undefined) return refuse('Conflict', 'the node is starting');
      const answer = coordinator.pin(fragment, to);
      return { status: answer.status, message: answer.message, fragment, to };
    }
    default:
      return refuse('NotFound', `no such change: ${path}`);
  }
}

function refuse(status: ChangeStatus, message: string): ChangeAnswer {
  return { status, message };
}

function planQuestion(body: Record<string, unknown>): PlanQuestion | string {
  const action = body.action ?? 'now';
  if (action === 'now') return { action };
  if (action !== 'join' && action !== 'leave' && action !== 'remove')
    return 'action must be one of now, join, leave, remove';
  if (!isValidNodeId(body.node)) return `${action} needs "node": a member id of 1–255 bytes`;
  return { action, node: body.node };
}

/** The request's JSON object body (empty: {}), or why it was refused. */
async function readBody(req: IncomingMessage): Promise<Record<string, unknown> | string> {
  const declared = Number(req.headers['content-length'] ?? 0);
  if (declared > ADMIN_BODY_BYTES_MAX)
    return `body of ${declared} bytes exceeds ADMIN_BODY_BYTES_MAX (${ADMIN_BODY_BYTES_MAX})`;
  const chunks: Buffer[] = [];
  let bytes = 0;
  for await (const chunk of req) {
    bytes += (chunk as Buffer).length;
    if (bytes > ADMIN_BODY_BYTES_MAX)
      return `body exceeds ADMIN_BODY_BYTES_MAX (${ADMIN_BODY_BYTES_MAX} bytes)`;
    chunks.push(chunk as Buffer);
  }
  if (bytes === 0) return {};
  try {
    const value: unknown = JSON.parse(Buffer.concat(chunks).toString('utf8'));
    if (typeof value !== 'object' || value === null || Array.isArray(value))
      return 'body must be a JSON object';
    return value as Record<string, unknown>;
  } catch (err) {
    return `body is not JSON: ${(err as Error).message}`;
  }
}
