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
