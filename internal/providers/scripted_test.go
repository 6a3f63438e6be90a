package providers_test

import (
	"context"
	"testing"

	"github.com/agentrun-dev/agentrun-operator/internal/blueprint"
	"github.com/agentrun-dev/agentrun-operator/internal/providers"
)

// TestScriptedCountsOnlyWhenAsked: the tests' scripted provider counts each
// run's calls; the manager's keeps nothing per run, so serving runs for
// days does not grow its memory.
func TestScriptedCountsOnlyWhenAsked(t *testing.T) {
	req := providers.Request{RunUID: "u1", Script: []blueprint.ScriptStep{{Text: "hi"}}, ChildOutputs: []string{"a"}}
	counted, uncounted := providers.NewScripted(), providers.NewUncountedScripted()
	for _, p := range []*providers.Scripted{counted, uncounted} {
		res, err := p.Call(context.Background(), req)
		if err != nil || res.Response.Text != "hi" {
			t.Fatalf("Call = %+v, %v; want the script's text", res, err)
		}
		if _, err := p.Call(context.Background(), providers.Request{RunUID: "u1", Purpose: "title", Task: "a task"}); err != nil {
			t.Fatal(err)
		}
	}
	if counted.Calls("u1") != 1 || counted.TitleCalls("u1") != 1 || len(counted.Merged("u1")) != 1 {
		t.Errorf("counted: %d calls, %d titles, merged %v; want 1, 1, [a]", counted.Calls("u1"), counted.TitleCalls("u1"), counted.Merged("u1"))
	}
	if uncounted.Calls("u1") != 0 || uncounted.TitleCalls("u1") != 0 || uncounted.Merged("u1") != nil {
		t.Errorf("uncounted kept %d calls, %d titles, merged %v; want nothing", uncounted.Calls("u1"), uncounted.TitleCalls("u1"), uncounted.Merged("u1"))
	}
}
