// Package helmchart holds the tests of the Helm chart in
// charts/agentrun-operator: they render it with the Helm SDK, keep it equal
// to what config/ installs (CRDs, RBAC, admission policy, Deployment), and
// install it on a real API server, where a run completes under the chart's
// ServiceAccount. It has no code of its own: the chart is the product.
package helmchart
