package manager

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
)

// memoryReleaser hands memory the manager no longer uses back to the
// system. After a burst of runs the heap shrinks (finished runs are kept as
// stubs), but the Go runtime returns the freed pages only slowly; the
// cluster then charges the manager for a peak long gone. Every interval,
// when more than threshold bytes of heap are free but still held, it
// returns them at once.
type memoryReleaser struct {
	interval  time.Duration
	threshold uint64
}

// NeedLeaderElection: every replica releases its own memory.
func (m memoryReleaser) NeedLeaderElection() bool { return false }

// Start releases until ctx ends.
func (m memoryReleaser) Start(ctx context.Context) error {
	t := time.NewTicker(m.interval)
	defer t.Stop()
	sample := []metrics.Sample{{Name: "/memory/classes/heap/free:bytes"}}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			metrics.Read(sample)
			if sample[0].Value.Kind() == metrics.KindUint64 && sample[0].Value.Uint64() > m.threshold {
				debug.FreeOSMemory()
				ctrl.Log.WithName("memory").V(1).Info("Returned free heap to the system", "freeBytes", sample[0].Value.Uint64())
			}
		}
	}
}
