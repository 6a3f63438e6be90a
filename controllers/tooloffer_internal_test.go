package controllers

import (
	"testing"

	"github.com/agentrun-dev/agentrun-operator/internal/blueprint"
)

// TestHidesBlocking: person-waiting tools are left out of the offer where
// the stage says allow_blocking_tools = false, and under yolo unless the
// stage requires them; other tools never are.
func TestHidesBlocking(t *testing.T) {
	plain := &blueprint.Stage{}
	quiet := &blueprint.Stage{StageTools: blueprint.StageTools{HideBlockingTools: true}}
	needs := &blueprint.Stage{StageTools: blueprint.StageTools{RequiredTools: []string{"ask_user"}}}
	cases := []struct {
		stage      *blueprint.Stage
		tool       string
		unattended bool
		want       bool
	}{
		{plain, "ask_user", false, false},
		{plain, "ask_user", true, true},
		{needs, "ask_user", true, false},
		{quiet, "present_for_review", false, true},
		{quiet, "wait_for_agent", true, false},
		{nil, "ask_user", true, true},
	}
	for _, c := range cases {
		if got := hidesBlocking(c.stage, c.tool, c.unattended); got != c.want {
			t.Errorf("hidesBlocking(%+v, %s, %v) = %v, want %v", c.stage, c.tool, c.unattended, got, c.want)
		}
	}
}
