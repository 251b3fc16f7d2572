// Graceful leave's last step (DESIGN.md "Placement"): a Leaving member exits membership (Exiting,
// then Removed) only once nothing depends on it any more. The node and the placement simulator
// both decide by this rule.

import type { AssignmentTable } from './assignment-table.js';

/**
 * A leaving node has handed everything over: the table it routes by lists it in no entry (not as a
 * replica, nor as a move's source or target), and it holds no fragment (each copy was drained to
 * the replicas that took it over, then dropped).
 */
export function leaveHandedOver(selfId: string, table: AssignmentTable, fragmentsHeld: number): boolean {
  return fragmentsHeld === 0 && !table.members().includes(selfId);
}
