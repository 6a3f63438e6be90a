package loadtest

import (
	"context"
	"fmt"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Revision is etcd's current revision as the API server reports it. A LIST
// with no resourceVersion is a consistent read, so the list's
// metadata.resourceVersion is the store's revision at the time of the read
// (GET /api/v1/namespaces/default/configmaps?limit=1). Every write to etcd
// (a create, an update, a patch that changes something, a delete) moves it
// by exactly one, whatever the object; so the difference of two readings
// counts the writes in between, the API server's own included (see
// IdleRate). TestRevisionCountsWrites checks this against the real server.
func (c *Cluster) Revision(ctx context.Context) (int64, error) {
	list, err := c.Kube.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return 0, fmt.Errorf("reading the etcd revision: %w", err)
	}
	rv, err := strconv.ParseInt(list.ResourceVersion, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("the list's resourceVersion %q is not an etcd revision: %w", list.ResourceVersion, err)
	}
	return rv, nil
}

// IdleRate is the revision's background rate: writes per second that nobody
// in the benchmark made (the API server renewing its identity lease,
// reconciling its endpoints, compacting etcd; an idle manager). It reads the
// revision, waits d, reads it again. A batch's writes/run includes this noise
// for the batch's duration; benchmarks report the rate so it can be judged,
// and Noise gives the correction.
func (c *Cluster) IdleRate(ctx context.Context, d time.Duration) (float64, error) {
	r0, err := c.Revision(ctx)
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	select {
	case <-time.After(d):
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	r1, err := c.Revision(ctx)
	if err != nil {
		return 0, err
	}
	return float64(r1-r0) / time.Since(t0).Seconds(), nil
}

// Noise is the expected number of background writes in a window of length d
// at the idle rate.
func Noise(idleRate float64, d time.Duration) float64 { return idleRate * d.Seconds() }
