package loadtest_test

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/test/loadtest"
)

// apiFloor is what a run's API writes cost the control plane at the
// least, measured on the operator's own cluster with its manager stopped:
// a bare client does for each of the finished runs in ns what any
// controller that shows a run's progress must, with the operator's own
// objects (their spec, labels and final status, so the same schema
// validation and object sizes): the create, a status write at the start,
// one on the interval (for runs long enough to have one), one at the
// end, and an Event. It is the API server's side of LongRun's bare
// client.
type apiFloor struct {
	// cpuPerRun is kube-apiserver + etcd CPU per run, less what they
	// spend idle over as long; writesPerRun the etcd revisions per run,
	// less the idle rate's.
	cpuPerRun    time.Duration
	writesPerRun float64
	runs         int
}

// measureAPIFloor runs apiFloor for the runs of ns, with an interval
// status write if interval; the manager must be stopped (it would drive
// the copies).
func measureAPIFloor(ctx context.Context, c *loadtest.Cluster, ns string, interval bool, idleMsPerSec, idleWrites float64) (apiFloor, error) {
	var list arv1.AgentRunList
	if err := c.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return apiFloor{}, err
	}
	var done []arv1.AgentRun
	for _, r := range list.Items {
		if r.Status.Phase == arv1.PhaseComplete {
			done = append(done, r)
		}
	}
	if len(done) == 0 {
		return apiFloor{}, fmt.Errorf("no Complete run in %s to copy", ns)
	}
	to, err := c.NewNamespace(ctx, "apifloor")
	if err != nil {
		return apiFloor{}, err
	}
	rev0, err := c.Revision(ctx)
	if err != nil {
		return apiFloor{}, err
	}
	cpu0, start := loadtest.CPUNow(), time.Now()
	err = loadtest.Parallel(ctx, len(done), concurrency, func(ctx context.Context, i int) error {
		src := &done[i]
		run := &arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: to, Name: src.Name, Labels: src.Labels}, Spec: src.Spec}
		if err := c.Client.Create(ctx, run); err != nil {
			return err
		}
		final := src.Status.DeepCopy()
		final.ObservedGeneration = run.Generation
		running := final.DeepCopy()
		running.Phase, running.FinishedAt = arv1.PhaseRunning, nil
		writes := []*arv1.AgentRunStatus{running, final}
		if interval {
			between := running.DeepCopy()
			between.Iteration++
			writes = []*arv1.AgentRunStatus{running, between, final}
		}
		for _, st := range writes {
			run.Status = *st
			if err := c.Client.Status().Update(ctx, run); err != nil {
				return fmt.Errorf("writing the status of %s: %w", run.Name, err)
			}
		}
		return c.Client.Create(ctx, &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Namespace: to, Name: run.Name + ".floor"},
			InvolvedObject: corev1.ObjectReference{Kind: "AgentRun", APIVersion: arv1.GroupVersion.String(), Namespace: to, Name: run.Name, UID: run.UID},
			Reason:         "Succeeded", Message: "The run completed", Type: corev1.EventTypeNormal, Source: corev1.EventSource{Component: "apifloor"},
		})
	})
	if err != nil {
		return apiFloor{}, err
	}
	took, cpu := time.Since(start), loadtest.CPUNow().Sub(cpu0)
	rev1, err := c.Revision(ctx)
	if err != nil {
		return apiFloor{}, err
	}
	n := len(done)
	spent := cpu.ControlPlane() - time.Duration(idleMsPerSec*took.Seconds()*float64(time.Millisecond))
	return apiFloor{
		cpuPerRun:    spent / time.Duration(n),
		writesPerRun: (float64(rev1-rev0) - loadtest.Noise(idleWrites, took)) / float64(n),
		runs:         n,
	}, nil
}
