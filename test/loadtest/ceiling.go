package loadtest

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// CeilingGVR is the throwaway resource the bare client writes:
// ceilings.loadtest.agentrun.dev/v1, namespaced, with a status subresource.
var CeilingGVR = schema.GroupVersionResource{Group: "loadtest.agentrun.dev", Version: "v1", Resource: "ceilings"}

// InstallCeilingCRD creates the Ceiling CRD (if missing) and waits until the
// API server serves it. Its status schema is a small cousin of AgentRun's:
// phase, stage, counters, usage, timestamps and conditions.
func (c *Cluster) InstallCeilingCRD(ctx context.Context) error {
	str := apiextv1.JSONSchemaProps{Type: "string"}
	integer := apiextv1.JSONSchemaProps{Type: "integer", Format: "int64"}
	obj := func(props map[string]apiextv1.JSONSchemaProps) apiextv1.JSONSchemaProps {
		return apiextv1.JSONSchemaProps{Type: "object", Properties: props}
	}
	condition := obj(map[string]apiextv1.JSONSchemaProps{
		"type": str, "status": str, "reason": str, "message": str,
		"lastTransitionTime": {Type: "string", Format: "date-time"}, "observedGeneration": integer,
	})
	status := obj(map[string]apiextv1.JSONSchemaProps{
		"observedGeneration": integer, "phase": str, "agentName": str, "model": str,
		"currentStage": str, "stageIndex": integer, "numStages": integer, "stage": str,
		"iteration": integer, "counter": integer,
		"usage": obj(map[string]apiextv1.JSONSchemaProps{
			"promptTokens": integer, "completionTokens": integer, "totalTokens": integer,
			"modelCalls": integer, "costUSD": str,
		}),
		"startedAt":  {Type: "string", Format: "date-time"},
		"updatedAt":  {Type: "string", Format: "date-time"},
		"conditions": {Type: "array", Items: &apiextv1.JSONSchemaPropsOrArray{Schema: &condition}},
	})
	spec := obj(map[string]apiextv1.JSONSchemaProps{"agent": str, "task": str})
	crd := &apiextv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: CeilingGVR.Resource + "." + CeilingGVR.Group},
		Spec: apiextv1.CustomResourceDefinitionSpec{
			Group: CeilingGVR.Group,
			Names: apiextv1.CustomResourceDefinitionNames{Plural: "ceilings", Singular: "ceiling", Kind: "Ceiling", ListKind: "CeilingList"},
			Scope: apiextv1.NamespaceScoped,
			Versions: []apiextv1.CustomResourceDefinitionVersion{{
				Name: CeilingGVR.Version, Served: true, Storage: true,
				Schema:       &apiextv1.CustomResourceValidation{OpenAPIV3Schema: ptrTo(obj(map[string]apiextv1.JSONSchemaProps{"spec": spec, "status": status}))},
				Subresources: &apiextv1.CustomResourceSubresources{Status: &apiextv1.CustomResourceSubresourceStatus{}},
			}},
		},
	}
	cs, err := apiextclient.NewForConfig(c.Config)
	if err != nil {
		return err
	}
	if _, err := cs.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the Ceiling CRD: %w", err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		got, err := cs.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
		if err == nil {
			for _, cond := range got.Status.Conditions {
				if cond.Type == apiextv1.Established && cond.Status == apiextv1.ConditionTrue {
					// Established is set before every API server handler
					// serves it; a list proves it is served.
					if _, err := c.Dyn.Resource(CeilingGVR).Namespace("default").List(ctx, metav1.ListOptions{Limit: 1}); err == nil {
						return nil
					}
				}
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the Ceiling CRD was not served within a minute (last error %v)", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func ptrTo[T any](v T) *T { return &v }

// CeilingResult is one bare-client batch.
type CeilingResult struct {
	N, Concurrency int
	Elapsed        time.Duration
	// Writes is the etcd revision's movement over the batch.
	Writes int64
	// CPU is what each process used over the batch, and Requests what the
	// API server was asked.
	CPU      CPUSample
	Requests Requests
}

// RunsPerSec is the batch's throughput.
func (r CeilingResult) RunsPerSec() float64 { return float64(r.N) / r.Elapsed.Seconds() }

// WritesPerRun is the revision delta per run (5 plus background noise).
func (r CeilingResult) WritesPerRun() float64 { return float64(r.Writes) / float64(r.N) }

// CeilingStatusPatches is how many status writes one bare "run" makes after
// its create.
const CeilingStatusPatches = 4

// BareCeiling does n "runs" in ns with concurrency workers, each run one
// create of a Ceiling and CeilingStatusPatches status merge patches that
// move it through three stages to Complete (each patch changes the phase or
// stage and a counter, so each is a real write). It is what a client with no
// logic at all costs the same API server: the ceiling an operator's
// throughput is compared with. InstallCeilingCRD must have run.
func (c *Cluster) BareCeiling(ctx context.Context, ns string, n, concurrency int) (CeilingResult, error) {
	res := CeilingResult{N: n, Concurrency: concurrency}
	rc := c.Dyn.Resource(CeilingGVR).Namespace(ns)
	r0, err := c.Revision(ctx)
	if err != nil {
		return res, err
	}
	req0, err := c.APIRequests(ctx)
	if err != nil {
		return res, err
	}
	start, cpu0 := time.Now(), CPUNow()
	err = Parallel(ctx, n, concurrency, func(ctx context.Context, i int) error {
		name := fmt.Sprintf("c-%05d", i)
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": CeilingGVR.GroupVersion().String(), "kind": "Ceiling",
			"metadata": map[string]any{"name": name, "namespace": ns},
			"spec":     map[string]any{"agent": "triple", "task": "bare-client ceiling run " + name},
		}}
		if _, err := rc.Create(ctx, u, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating Ceiling %s: %w", name, err)
		}
		for step := 1; step <= CeilingStatusPatches; step++ {
			patch, err := json.Marshal(map[string]any{"status": ceilingStatus(step)})
			if err != nil {
				return err
			}
			if _, err := rc.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
				return fmt.Errorf("patching Ceiling %s status (step %d): %w", name, step, err)
			}
		}
		return nil
	})
	res.Elapsed, res.CPU = time.Since(start), CPUNow().Sub(cpu0)
	if err != nil {
		return res, err
	}
	req1, err := c.APIRequests(ctx)
	if err != nil {
		return res, err
	}
	res.Requests = req1.Sub(req0)
	r1, err := c.Revision(ctx)
	if err != nil {
		return res, err
	}
	res.Writes = r1 - r0
	return res, nil
}

// ceilingStatus is the status after step (1..4): Running through plan,
// build and review, then Complete.
func ceilingStatus(step int) map[string]any {
	stages := []string{"plan", "build", "review"}
	idx := min(step-1, 2)
	phase, ready, reconciling := "Running", "False", "True"
	if step == CeilingStatusPatches {
		phase, ready, reconciling = "Complete", "True", "False"
	}
	now := time.Now().UTC().Format(time.RFC3339)
	return map[string]any{
		"observedGeneration": 1, "phase": phase, "agentName": "triple", "model": "demo/scripted-1",
		"currentStage": stages[idx], "stageIndex": idx, "numStages": 3,
		"stage": fmt.Sprintf("%s %d/3", stages[idx], idx+1), "iteration": 1, "counter": step,
		"usage": map[string]any{"promptTokens": 100 * step, "completionTokens": 10 * step,
			"totalTokens": 110 * step, "modelCalls": step, "costUSD": fmt.Sprintf("0.00%d", step)},
		"startedAt": now, "updatedAt": now,
		"conditions": []any{
			map[string]any{"type": "Ready", "status": ready, "reason": phase, "message": "The run is " + phase + " at stage " + stages[idx], "lastTransitionTime": now, "observedGeneration": 1},
			map[string]any{"type": "Reconciling", "status": reconciling, "reason": "Working", "message": "Step " + fmt.Sprint(step) + " of the scripted model", "lastTransitionTime": now, "observedGeneration": 1},
		},
	}
}

// Parallel calls fn for i in [0, n) from concurrency goroutines and returns
// the first error (after which no new calls start).
func Parallel(ctx context.Context, n, concurrency int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan int)
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	for range max(1, concurrency) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := fn(ctx, i); err != nil {
					once.Do(func() { first = err; cancel() })
				}
			}
		}()
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if first == nil && ctx.Err() != nil && n > 0 {
		// The caller's context ended: some runs were never started.
		first = ctx.Err()
	}
	return first
}
