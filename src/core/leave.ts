// Graceful leave's last step (DESIGN.md "Placement"): a Leaving member exits membership (Exiting,
// then Removed) only once nothing depends on it any more. The node and the placement simulator
// both decide by this rule.

import type { AssignmentTable } from './assignment-table.js';
import { eligibleMembers, type MemberView } from './coordinator.js';
import type { MemberState } from './membership-types.js';

/**
 * Why a node may not start to leave, or undefined when it may: a node the table lists (a replica, a
 * move's source or target) leaves only once its replicas moved to other members, and those that
 * may take them (Up, itself aside) must be at least `replicas` — otherwise the leave could never
 * finish and would hang, Leaving, until members join (as CockroachDB's decommission of a node of
 * three once looped for ever). A node the table lists nowhere may always go.
 */
export function leaveRefusal(
  selfId: string,
  table: AssignmentTable,
  view: readonly MemberView[],
  replicas: number,
): string | undefined {
  if (!table.members().includes(selfId)) return undefined;
  const others = eligibleMembers(view).filter((id) => id !== selfId);
  if (others.length >= replicas) return undefined;
  return `cannot leave: ${others.length} other Up member${others.length === 1 ? '' : 's'} could take this node's replicas, fewer than the ${replicas} each fragment has; join a member first`;
}

/**
 * A leaving node has handed everything over: the table it routes by lists it in no entry (not as a
 * replica, nor as a move's source or target), and it holds no fragment (each copy was drained to
 * the replicas that took it over, then dropped).
 */
export function leaveHandedOver(selfId: string, table: AssignmentTable, fragmentsHeld: number): boolean {
  return fragmentsHeld === 0 && !table.members().includes(selfId);
}

/**
 * Whether a node resumes a leave at start, from its own record in the member list its last run
 * persisted: a leave that run began (Leaving) or all but finished (Exiting) goes on, as the operator
 * asked for it; a crash or a restart does not take it back. The node starts Leaving then. (A node
 * that left persists itself Exiting until a majority heard its Removed, so a leave whose news a
 * crash cut short is announced again.)
 */
export function resumesLeave(persistedSelfState: MemberState | undefined): boolean {
  return persistedSelfState === 'Leaving' || persistedSelfState === 'Exiting';
}
