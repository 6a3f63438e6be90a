package controllers

import (
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
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
