package loadtest

import "fmt"

// ProvidersTOML is the provider ConfigMap's providers.toml for the bench
// blueprints: the operator's built-in scripted provider, which answers from
// each stage's [[stages.X.script]] without any network.
const ProvidersTOML = `
[providers.demo]
type = "scripted"
models = ["scripted-1"]
`

// ProvidersConfigMap is the name the operator looks the provider config up
// by when a run names none.
const ProvidersConfigMap = "agentrun-providers"

// ThreeStageModelCalls is how many model calls a run of ThreeStage makes.
const ThreeStageModelCalls = 3

// ThreeStage is a blueprint of three stages (plan, build, review) with
// exactly one scripted model call each, so a run makes 3 model calls and
// completes; titles are off so no titling call is made.
const ThreeStage = `
[agent]
name = "bench"
[agent.title]
enabled = false

[stages.plan]
[stages.plan.model]
models = [{provider = "demo", model = "scripted-1"}]
[stages.plan.transitions.build]
condition = "always"
[[stages.plan.script]]
text = "plan ready"
usage = {prompt = 100, completion = 10}

[stages.build]
[stages.build.model]
models = [{provider = "demo", model = "scripted-1"}]
[stages.build.transitions.review]
condition = "always"
[[stages.build.script]]
text = "built"
usage = {prompt = 200, completion = 50}

[stages.review]
allow_complete = true
[stages.review.model]
models = [{provider = "demo", model = "scripted-1"}]
[[stages.review.script]]
text = "looks good"
complete = true
output = "all done"
usage = {prompt = 50, completion = 5}
`

// WaitsForAPerson is a one-stage blueprint whose run makes one model call
// and then, leaving the stage, stops at an interaction point that only a
// person can pass (unattended = "ask") and that never times out: the run
// stays in phase WaitingInput, active, for as long as the benchmark needs.
const WaitsForAPerson = `
[agent]
name = "waits"
[agent.title]
enabled = false

[limits]
interaction_timeout_secs = 0

[stages.work]
allow_complete = true
[stages.work.model]
models = [{provider = "demo", model = "scripted-1"}]
[[stages.work.interaction_points]]
name = "sign-off"
prompt = "Sign off the work?"
unattended = "ask"
[[stages.work.script]]
text = "ready for sign-off"
complete = true
output = "done"
`

// CallsATool is a one-stage blueprint whose scripted model calls the MCP
// tool read_doc on the server at url, then completes.
func CallsATool(url string) string {
	return fmt.Sprintf(`
[agent]
name = "tooling"
[agent.title]
enabled = false

[mcp_servers.tracker]
url = %q

[stages.work]
allow_complete = true
[stages.work.model]
models = [{provider = "demo", model = "scripted-1"}]
[[stages.work.script]]
text = "reading"
tool_calls = [{name = "read_doc", arguments = '{"id":"spec"}'}]
[[stages.work.script]]
complete = true
output = "done"
`, url)
}
