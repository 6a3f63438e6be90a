package controllers

import (
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/blueprint"
	"github.com/agentrun-dev/agentrun-operator/internal/runstate"
)

// TestPendingMessagesInSendOrder: only the message annotations are read,
// ordered by the parent's call seq and index (not as strings: call-10
// comes after call-9).
func TestPendingMessagesInSendOrder(t *testing.T) {
	run := &arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
		messageAnnotationPrefix + "call-10-0": "c",
		messageAnnotationPrefix + "call-9-1":  "b",
		messageAnnotationPrefix + "call-9-0":  "a",
		"agentrun.dev/other":                  "x",
	}}}
	want := []runstate.Message{{ID: "call-9-0", Text: "a"}, {ID: "call-9-1", Text: "b"}, {ID: "call-10-0", Text: "c"}}
	if got := pendingMessages(run); !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

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
