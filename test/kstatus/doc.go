// Package kstatus holds the test that runs read as kstatus says (the
// health Flux and kpt compute from conditions, docs/gitops.md): a real
// manager moves a run, and cli-utils' kstatus, which only this test uses,
// judges its status. It lives in the test module so that cli-utils stays
// out of the operator's go.mod.
package kstatus
