// Package a2aserver serves AgentRuns over the A2A protocol (JSON-RPC, with
// the A2A Go SDK's transport): an agent card per exposed blueprint, and
// tasks that are AgentRuns in the one namespace the endpoint serves.
//
// The endpoint holds no privilege of its own: every request's bearer token
// is forwarded to the API server in a client made for that request, so the
// API server authenticates and authorizes the caller exactly as it would
// kubectl; a token it does not accept is HTTP 401 before any JSON-RPC.
// Every method needs the agent's blueprint to expose it, tasks of agents
// that do not are not served. Task state comes from a watch on the run,
// never a poll.
package a2aserver
