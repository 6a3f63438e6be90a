package queue

import "testing"

// TestNamespaceCapsFollowTheAnnotation: a valid annotation overrides the
// default, "0" means no bound of the namespace's own, anything else is
// ignored, and a change (or removal) is reported so admission refills.
func TestNamespaceCapsFollowTheAnnotation(t *testing.T) {
	c := newNamespaceCaps(3)
	steps := []struct {
		ann     map[string]string
		gone    bool
		changed bool
		limit   int
	}{
		{ann: nil, changed: false, limit: 3},
		{ann: map[string]string{"agentrun.dev/max-active-runs": "1"}, changed: true, limit: 1},
		{ann: map[string]string{"agentrun.dev/max-active-runs": " 1 "}, changed: false, limit: 1},
		{ann: map[string]string{"agentrun.dev/max-active-runs": "0"}, changed: true, limit: 0},
		{ann: map[string]string{"agentrun.dev/max-active-runs": "-2"}, changed: true, limit: 3},
		{ann: map[string]string{"agentrun.dev/max-active-runs": "many"}, changed: false, limit: 3},
		{ann: map[string]string{"agentrun.dev/max-active-runs": "5"}, changed: true, limit: 5},
		{ann: map[string]string{"agentrun.dev/max-active-runs": "5"}, gone: true, changed: true, limit: 3},
	}
	for i, s := range steps {
		if got := c.observe("team-a", s.ann, s.gone); got != s.changed {
			t.Errorf("step %d (%v gone=%v): changed = %v, want %v", i, s.ann, s.gone, got, s.changed)
		}
		if got := c.limit("team-a"); got != s.limit {
			t.Errorf("step %d: limit = %d, want %d", i, got, s.limit)
		}
		if got := c.limit("team-b"); got != 3 {
			t.Errorf("step %d: another namespace's limit = %d, want the default 3", i, got)
		}
	}
}
