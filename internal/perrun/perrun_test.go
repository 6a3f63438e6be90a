package perrun

import "testing"

func TestBoxTakesOnceAndRestoresUnlessNewer(t *testing.T) {
	b := New[string]()
	if _, ok := b.Take("a"); ok || b.Has("a") {
		t.Fatal("an empty box holds nothing")
	}
	b.Put("a", "first")
	b.Put("a", "second")
	if v, ok := b.Take("a"); !ok || v != "second" {
		t.Fatalf("take = %q %v, want the last put", v, ok)
	}
	if _, ok := b.Take("a"); ok {
		t.Fatal("a value is taken once")
	}
	b.Restore("a", "old")
	if v, _ := b.Take("a"); v != "old" {
		t.Fatalf("restore into an empty slot: %q", v)
	}
	b.Put("a", "new")
	b.Restore("a", "old")
	if v, _ := b.Take("a"); v != "new" {
		t.Fatalf("restore must not replace a newer value: %q", v)
	}
}

func TestBoxUpdatesUnderItsLock(t *testing.T) {
	b := New[int]()
	add := func(v int, _ bool) (int, bool) { return v + 1, true }
	b.Update("a", add)
	b.Update("a", add)
	if v, ok := b.Get("a"); !ok || v != 2 {
		t.Fatalf("after two increments from nothing: %d %v, want 2", v, ok)
	}
	b.Update("b", func(v int, ok bool) (int, bool) {
		if ok {
			t.Error("b had no value")
		}
		return v, false
	})
	if b.Has("b") || b.Len() != 1 {
		t.Fatalf("an update that keeps nothing left b %v, len %d", b.Has("b"), b.Len())
	}
	b.Update("a", func(v int, _ bool) (int, bool) { return v, false })
	if b.Has("a") || b.Len() != 0 {
		t.Fatalf("an update that keeps nothing dropped a's value: has %v, len %d", b.Has("a"), b.Len())
	}
}

func TestRegistryForgetsARunEverywhere(t *testing.T) {
	a, b := New[string](), New[int]()
	g := NewRegistry()
	g.Register("a", a)
	g.Register("b", b)
	a.Put("r1", "x")
	b.Put("r1", 1)
	b.Put("r2", 2)
	if got := g.HeldBy("r1"); len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Fatalf("HeldBy(r1) = %v, want [a b]", got)
	}
	if n := g.Runs(); n != 2 {
		t.Fatalf("Runs = %d, want 2 (r1 counted once)", n)
	}
	g.Forget("r1")
	if got := g.HeldBy("r1"); len(got) != 0 {
		t.Fatalf("after Forget, r1 held by %v", got)
	}
	if !b.Has("r2") || g.Runs() != 1 {
		t.Fatalf("Forget(r1) touched r2: has %v, runs %d", b.Has("r2"), g.Runs())
	}
}
