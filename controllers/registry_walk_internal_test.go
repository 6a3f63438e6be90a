package controllers

import (
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/executor"
	"github.com/agentrun-dev/agentrun-operator/internal/perrun"
)

// TestEveryPerRunMapIsRegistered: every holder of per-run state the
// reconciler reaches through its own types (a perrun.Box, or anything
// with Forget, Has and EachRun) is in its registry, so forgetting a run
// drops it from all of them. A holder reached through a registered one is
// that one's to forget.
func TestEveryPerRunMapIsRegistered(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := arv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).Build()
	r, err := NewAgentRunReconciler(Deps{Client: c, APIReader: c, Recorder: events.NewFakeRecorder(10), Pool: executor.New(4, 0)})
	if err != nil {
		t.Fatal(err)
	}
	registered := map[uintptr]string{}
	r.runState.Each(func(name string, h perrun.Holder) {
		if v := reflect.ValueOf(h); v.Kind() == reflect.Pointer {
			registered[v.Pointer()] = name
		}
	})
	holder := reflect.TypeFor[perrun.Holder]()
	const ours = "github.com/agentrun-dev/agentrun-operator/controllers"
	visited := map[uintptr]bool{}
	var missing []string
	var walk func(v reflect.Value, path string)
	walk = func(v reflect.Value, path string) {
		for i := range v.NumField() {
			f, name := v.Field(i), path+"."+v.Type().Field(i).Name
			if f.Kind() != reflect.Pointer || f.IsNil() || f.Type().Elem().Kind() != reflect.Struct {
				continue
			}
			p := f.Pointer()
			if _, ok := registered[p]; ok || visited[p] {
				continue
			}
			visited[p] = true
			if f.Type().Implements(holder) {
				missing = append(missing, name+" ("+f.Type().String()+")")
				continue
			}
			if strings.HasPrefix(f.Type().Elem().PkgPath(), ours) {
				walk(f.Elem(), name)
			}
		}
	}
	walk(reflect.ValueOf(r).Elem(), "r")
	if len(missing) > 0 {
		t.Errorf("holders of per-run state not in the registry (registerRunState): %s", strings.Join(missing, ", "))
	}
	if len(registered) < 10 {
		t.Fatalf("only %d holders registered; the walk checks nothing", len(registered))
	}
}
