package priority

import (
	"strings"
	"testing"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

func TestParseAndResolve(t *testing.T) {
	c, err := Parse(map[string]string{"low": "-10", "normal": " 0 ", "urgent": "1000", DefaultKey: "low"})
	if err != nil {
		t.Fatal(err)
	}
	seven := int32(7)
	for _, tc := range []struct {
		spec arv1.AgentRunSpec
		want int32
	}{
		{arv1.AgentRunSpec{Priority: &seven}, 7},
		{arv1.AgentRunSpec{PriorityClassName: "urgent"}, 1000},
		{arv1.AgentRunSpec{PriorityClassName: "normal"}, 0},
		{arv1.AgentRunSpec{}, -10},                             // the default class
		{arv1.AgentRunSpec{PriorityClassName: "deleted"}, -10}, // a class since removed
	} {
		if got := c.Of(&tc.spec); got != tc.want {
			t.Errorf("Of(%+v) = %d, want %d", tc.spec, got, tc.want)
		}
	}
	if got := (Classes{}).Of(&arv1.AgentRunSpec{PriorityClassName: "urgent"}); got != 0 {
		t.Errorf("with no classes a class resolves to %d, want 0", got)
	}
}

func TestParseRefusesBadClasses(t *testing.T) {
	for _, tc := range []struct {
		data map[string]string
		want string
	}{
		{map[string]string{"urgent": "high"}, `urgent: "high" is not an integer`},
		{map[string]string{"urgent": "3000000000"}, `urgent: "3000000000" is not an integer`},
		{map[string]string{"urgent": "1", DefaultKey: "normal"}, `_default names "normal", which is not a class`},
	} {
		_, err := Parse(tc.data)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%v) = %v, want an error saying %s", tc.data, err, tc.want)
		}
	}
}

func TestStoreSwaps(t *testing.T) {
	var s Store
	if s.Load().Default() != 0 {
		t.Fatal("an empty store has a default")
	}
	c, err := Parse(map[string]string{"hi": "5", DefaultKey: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	s.Set(c)
	if s.Load().Default() != 5 {
		t.Fatalf("default %d after Set, want 5", s.Load().Default())
	}
}
