// Graceful leave's last step (DESIGN.md "Placement"): a Leaving member exits membership (Exiting,
// then Removed) only once nothing depends on it any more. The node and the placement simulator
// both decide by this rule.

import type { AssignmentTable } from './assignment-table.js';
import type { MemberState } from './membership-types.js';

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
 * asked for it; a crash or a restart does not take it back. The node starts Leaving then.
 */
export function resumesLeave(persistedSelfState: MemberState | undefined): boolean {
  return persistedSelfState === 'Leaving' || persistedSelfState === 'Exiting';
}
