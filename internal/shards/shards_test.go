package shards

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

func TestAssignSpreadsShardsEvenly(t *testing.T) {
	for _, c := range []struct{ shards, members int }{{6, 3}, {7, 3}, {4, 2}, {1, 3}, {3, 1}} {
		var m []string
		for i := range c.members {
			m = append(m, fmt.Sprintf("replica-%d", i))
		}
		a := Assign(c.shards, m)
		count := map[string]int{}
		for s := range c.shards {
			count[a[s]]++
		}
		lo, hi := c.shards, 0
		for _, id := range m {
			lo, hi = min(lo, count[id]), max(hi, count[id])
		}
		if len(a) != c.shards || hi-lo > 1 {
			t.Errorf("%d shards over %d members: %v, want every shard assigned and counts within one", c.shards, c.members, count)
		}
	}
	if a := Assign(3, nil); len(a) != 0 {
		t.Errorf("no members, yet shards assigned: %v", a)
	}
}

func TestAssignAgreesWhateverTheOrder(t *testing.T) {
	a := Assign(5, []string{"b", "a", "c"})
	b := Assign(5, []string{"c", "b", "a", "a"})
	for s := range 5 {
		if a[s] != b[s] {
			t.Fatalf("shard %d: %q vs %q; replicas listing members in another order must agree", s, a[s], b[s])
		}
	}
}

func TestOfIsStableAndInRange(t *testing.T) {
	seen := map[int]int{}
	for i := range 1000 {
		uid := types.UID(fmt.Sprintf("uid-%d", i))
		s := Of(uid, 4)
		if s < 0 || s >= 4 || s != Of(uid, 4) {
			t.Fatalf("Of(%s) = %d", uid, s)
		}
		seen[s]++
	}
	for s := range 4 {
		if seen[s] < 150 {
			t.Errorf("shard %d got %d of 1000 runs: uneven", s, seen[s])
		}
	}
	if Of("x", 1) != 0 {
		t.Error("one shard must be shard 0")
	}
}
