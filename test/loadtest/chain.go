package loadtest

import (
	"fmt"
	"strings"
)

// ChainWriteStage is the stage of a ChainBlueprint with a write tool whose
// system prompt holds WriteToolMarker.
const ChainWriteStage = 2

// ChainBlueprint is a long run: calls model calls to m1 of provider llm
// (LatencyProvidersTOML), one per stage s1, s2, ..., each moving on by an
// always edge with the conversation carried (the default transform), so
// every call's answer is followed by another call the journal alone
// decides. The last stage's system prompt holds FinalStageMarker, so the
// LatencyServer answers it with the complete tool call and the run
// completes after exactly calls model calls.
//
// With mcpURL set, the run also makes one write through the MCP server
// there (mcptest's create_ticket, allowed without approval): stage
// ChainWriteStage's system prompt holds WriteToolMarker, so that stage
// makes two calls with the write between them, and the blueprint has one
// stage fewer, for the same calls in all.
func ChainBlueprint(calls int, mcpURL string) string {
	stages := calls
	if mcpURL != "" {
		stages--
	}
	if stages < 1 || (mcpURL != "" && stages < ChainWriteStage) {
		panic(fmt.Sprintf("ChainBlueprint: %d calls are too few", calls))
	}
	var b strings.Builder
	b.WriteString("[agent]\nname = \"chain\"\n[agent.title]\nenabled = false\n")
	if mcpURL != "" {
		fmt.Fprintf(&b, "\n[mcp_servers.tracker]\nurl = %q\n[tools.%s]\npermission = \"allow\"\n", mcpURL, WriteTool)
	}
	for i := 1; i <= stages; i++ {
		prompt := fmt.Sprintf("You are stage %d of %d. Answer briefly.", i, stages)
		switch {
		case i == stages:
			prompt = FinalStageMarker + " " + prompt + " Review the work, then call complete."
		case mcpURL != "" && i == ChainWriteStage:
			prompt = WriteToolMarker + " " + prompt + " Open a ticket for the task first."
		}
		fmt.Fprintf(&b, "\n[stages.s%d]\nsystem_prompt = %q\n", i, prompt)
		if i == stages {
			b.WriteString("allow_complete = true\n")
		}
		fmt.Fprintf(&b, "[stages.s%d.model]\nmodels = [{provider = \"llm\", model = \"m1\"}]\n", i)
		if i < stages {
			fmt.Fprintf(&b, "[stages.s%d.transitions.s%d]\ncondition = \"always\"\n", i, i+1)
		}
	}
	return b.String()
}
