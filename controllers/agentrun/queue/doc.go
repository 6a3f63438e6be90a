// Package queue decides when an AgentRun may be driven: it holds the
// active-run line (a slot per run driven at once, by priority class, then
// first come, first served, within the manager's and each namespace's
// bounds) and the quota gate (AgentRunQuota, ClusterAgentRunQuota: a start
// held back, a model call charged and refused). The AgentRun reconciler
// asks it before it derives anything; it reads runs, quotas and Namespaces
// from the cache and never writes to the API server.
package queue
