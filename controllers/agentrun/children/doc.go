// Package children is the AgentRun reconciler's job of a run's child runs:
// fan-out workers and sub-agents. It creates them under deterministic names
// (a retried create finds what it made), counts the ones the cache has not
// shown yet, lists them through the controller-owner UID index, makes them
// follow their parent's cancel and pause, reads the workers' outputs for
// the merge, and deletes a deleted run's children.
package children
