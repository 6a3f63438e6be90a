// Package egress decides which network destinations the manager may connect
// to on a tenant's behalf, and enforces it when connecting.
//
// Threat model: a tenant chooses the URLs of webhook callbacks, MCP tool
// servers and model providers, and the manager calls them from inside the
// cluster with its own network position. Without a check that is a
// server-side request forgery path to the cloud metadata service (node
// credentials), the Kubernetes API server, loopback services and the
// manager pod itself. Names are not trusted: DNS is tenant-influenced (an
// ExternalName Service, a record that rebinds between check and use), so
// the decision that counts is made on the address actually dialed, after
// the dialer's own lookup, and a pooled connection allowed for one
// namespace's exceptions is never handed to another namespace.
//
// A Policy is built from a Config (a ConfigMap's TOML document merged with
// the manager's flags) and is immutable; build a new one when the config
// changes. See docs/egress.md for the defaults, the format and precedence.
package egress
