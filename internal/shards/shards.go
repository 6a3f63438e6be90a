// Package shards divides runs among manager replicas with Kubernetes
// Leases. Runs carry a shard number, fixed at creation; each shard is
// driven by the replica that holds its Lease (agentrun-shard-<n>). Every
// replica keeps a member Lease of its own, renewed as it lives, and from the
// live members each works out the same even assignment of shards to
// replicas; it competes only for its own shards and gives up the others, so
// shards spread over the replicas and move when one joins or leaves. A
// replica that cannot renew a shard's Lease stops driving it at the renew
// deadline, before the Lease expires and another replica may take it.
//
// While it drives a shard, a replica reads the shard's runs through a cache
// of their own (Caches: the runs' memory divides among the replicas), and
// the Labeler gives a run created without a shard its label, so it joins
// one.
package shards

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/ptr"

	"github.com/agentrun-dev/agentrun-operator/internal/store"
)

// Labels on runs and Leases.
const (
	// LabelShard is a run's shard number.
	LabelShard = "agentrun.dev/shard"
	// LabelLease says what a Lease is for: "member" or "shard".
	LabelLease = "agentrun.dev/lease"
)

// ReplicaHeader names the replica on every outbound call a sharded
// manager makes for a run (model providers, MCP servers, webhooks), so the
// receiving side can tell which replica called: a fencing audit, and
// useful in a tool server's logs.
const ReplicaHeader = "Agentrun-Replica"

// Default Lease timings: client-go's leader-election defaults.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// Of is the shard a run of this UID belongs to, out of n.
func Of(uid types.UID, n int) int {
	if n <= 1 {
		return 0
	}
	h := fnv.New32a()
	h.Write([]byte(uid))
	return int(h.Sum32() % uint32(n))
}

// Assign is the even assignment of n shards to the live members: shard i
// goes to the i-th member in name order, round and round.
func Assign(n int, members []string) map[int]string {
	m := slices.Clone(members)
	slices.Sort(m)
	m = slices.Compact(m)
	out := map[int]string{}
	if len(m) == 0 {
		return out
	}
	for i := range n {
		out[i] = m[i%len(m)]
	}
	return out
}

// Config is how a replica takes part.
type Config struct {
	Shards    int
	Namespace string
	// Identity names this replica in the Leases it holds.
	Identity                                  string
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	Kube                                      kubernetes.Interface
	// Drive is called when this replica takes a shard, with a context that
	// ends as soon as it may no longer drive it (lost, given up, or the
	// renew deadline passed); Drive returns when it has stopped.
	Drive func(ctx context.Context, shard int)
	Log   logr.Logger
}

// Coordinator takes part in the shard Leases for one replica.
type Coordinator struct {
	cfg Config

	mu   sync.Mutex
	held map[int]*hold
	// running is the elector competing for each shard assigned here.
	running map[int]*elector
	// driving serialises Drive per shard: a shard given up and taken again
	// is not driven again until its last Drive has stopped.
	driving map[int]*sync.Mutex
	// memberRenewed is when the member Lease was last written.
	memberRenewed time.Time
}

// hold is this replica's hold on one shard's Lease. It is good until the
// renew deadline after the start of the last write that renewed the
// Lease: every other replica sees the Lease as held for a whole Lease
// duration after that write, so the hold ends first, on this replica's own
// clock, whatever the other clocks say.
type hold struct {
	renewed time.Time
}

func (h *hold) goodAt(now time.Time, deadline time.Duration) bool {
	return h != nil && now.Before(h.renewed.Add(deadline))
}

// New checks the config and makes a coordinator.
func New(cfg Config) (*Coordinator, error) {
	switch {
	case cfg.Shards < 1:
		return nil, errors.New("shards: at least one shard")
	case cfg.Namespace == "":
		return nil, errors.New("shards: a namespace for the Leases is required (--lease-namespace)")
	case cfg.Identity == "" || cfg.Kube == nil || cfg.Drive == nil:
		return nil, errors.New("shards: an identity, a Kubernetes client and a Drive function are required")
	}
	if cfg.LeaseDuration == 0 {
		cfg.LeaseDuration = DefaultLeaseDuration
	}
	if cfg.RenewDeadline == 0 {
		cfg.RenewDeadline = DefaultRenewDeadline
	}
	if cfg.RetryPeriod == 0 {
		cfg.RetryPeriod = DefaultRetryPeriod
	}
	if err := CheckTimings(cfg.LeaseDuration, cfg.RenewDeadline, cfg.RetryPeriod); err != nil {
		return nil, err
	}
	if cfg.Log.GetSink() == nil {
		cfg.Log = logr.Discard()
	}
	return &Coordinator{cfg: cfg, held: map[int]*hold{}, running: map[int]*elector{}, driving: map[int]*sync.Mutex{}}, nil
}

// CheckTimings refuses Lease timings under which a replica could still
// drive a shard another has taken, or would lose its shards on one slow
// renewal.
func CheckTimings(duration, renewDeadline, retryPeriod time.Duration) error {
	switch {
	case duration < time.Second || renewDeadline <= 0 || retryPeriod <= 0:
		return fmt.Errorf("the lease duration (--lease-duration) must be at least 1s, and the renew deadline and retry period positive")
	case renewDeadline >= duration:
		return fmt.Errorf("the renew deadline (--lease-renew-deadline %s) must be shorter than the lease duration (--lease-duration %s), or a replica could still drive a shard another has taken", renewDeadline, duration)
	case retryPeriod*2 > renewDeadline:
		return fmt.Errorf("the retry period (--lease-retry-period %s) must be at most half the renew deadline (--lease-renew-deadline %s), so one failed renewal does not lose the shards", retryPeriod, renewDeadline)
	}
	return nil
}

// Owns reports whether this replica drives the shard now: it holds the
// shard's Lease and the hold has not passed its renew deadline.
func (c *Coordinator) Owns(shard int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ownsLocked(shard, time.Now())
}

// ownsLocked: the hold is good and its elector has not been stopped (a
// replica stopping ends every hold at once, before it releases them).
func (c *Coordinator) ownsLocked(shard int, now time.Time) bool {
	e := c.running[shard]
	return e != nil && e.ctx.Err() == nil && c.held[shard].goodAt(now, c.cfg.RenewDeadline)
}

// Owned lists the shards this replica drives now.
func (c *Coordinator) Owned() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []int
	now := time.Now()
	for s := range c.held {
		if c.ownsLocked(s, now) {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

// NeedLeaderElection is false: every replica takes part, not only the
// leader.
func (c *Coordinator) NeedLeaderElection() bool { return false }

// Start takes part until ctx ends, then gives its shards up and leaves.
func (c *Coordinator) Start(ctx context.Context) error {
	t := time.NewTicker(c.cfg.RetryPeriod)
	defer t.Stop()
	for {
		if err := c.round(ctx); err != nil && ctx.Err() == nil {
			c.cfg.Log.Error(err, "Taking part in the shard Leases")
		}
		select {
		case <-ctx.Done():
			c.leave()
			return nil
		case <-t.C:
		}
	}
}

// round renews this replica's member Lease, reads the live members, and
// competes for exactly the shards assigned to it.
func (c *Coordinator) round(ctx context.Context) error {
	if time.Since(c.memberRenewed) >= c.cfg.LeaseDuration/3 {
		at := time.Now()
		if err := c.renewMember(ctx); err != nil {
			return err
		}
		c.memberRenewed = at
	}
	members, err := c.liveMembers(ctx)
	if err != nil {
		return err
	}
	assigned := Assign(c.cfg.Shards, members)
	for shard := range c.cfg.Shards {
		c.mu.Lock()
		owns := c.ownsLocked(shard, time.Now())
		c.mu.Unlock()
		if assigned[shard] == c.cfg.Identity && !owns && c.freeLease(ctx, shard, members) {
			// An elector already waiting on the shard would try again
			// only after a jittered retry period: start a new one, whose
			// first try is at once.
			c.mu.Lock()
			if !c.ownsLocked(shard, time.Now()) {
				c.stopLocked(shard)
			}
			c.mu.Unlock()
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for shard := range c.cfg.Shards {
		mine := assigned[shard] == c.cfg.Identity
		_, running := c.running[shard]
		switch {
		case mine && !running:
			c.running[shard] = c.elect(ctx, shard)
		case !mine && running:
			// Another replica's now: give it up (the Lease is released, so it
			// can take it at once).
			c.stopLocked(shard)
		}
	}
	return nil
}

// freeLease reports whether the shard's Lease has no holder: it was
// released, or its holder has left (no live member Lease) and its own
// record has expired, in which case freeLease clears the holder. Either
// way this replica, new to the shard, acquires it at once instead of first
// watching the record for a whole Lease duration (client-go's rule for a
// holder it has not seen renew), which keeps a takeover within the Lease
// duration and a retry period of a death. Clearing trusts the holder's
// record times the way member liveness does: it is safe while clocks
// differ by less than the Lease duration minus the renew deadline, as the
// old holder fenced itself at its last renewal plus the renew deadline.
// The write is optimistic (the record's resourceVersion): a renewal or
// another replica's clearing wins.
func (c *Coordinator) freeLease(ctx context.Context, shard int, members []string) bool {
	leases := c.cfg.Kube.CoordinationV1().Leases(c.cfg.Namespace)
	l, err := leases.Get(ctx, LeaseName(shard), metav1.GetOptions{})
	if err != nil {
		return false
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
		return true
	}
	holder, live := liveHolder(&l.Spec, time.Now())
	if holder == c.cfg.Identity || live || slices.Contains(members, holder) {
		return false
	}
	l.Spec.HolderIdentity = ptr.To("")
	if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		return false
	}
	c.cfg.Log.Info("Cleared the expired shard Lease of a replica that left", "shard", shard, "holder", holder)
	return true
}

// elector competes for one shard's Lease; cancel stops it, releasing the
// Lease if held.
type elector struct {
	ctx    context.Context
	cancel context.CancelFunc
}

// elect competes for one shard's Lease and drives it while held. Called
// with mu held.
func (c *Coordinator) elect(parent context.Context, shard int) *elector {
	ctx, cancel := context.WithCancel(parent)
	e := &elector{ctx: ctx, cancel: cancel}
	lock := &fencedLock{Interface: &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: LeaseName(shard), Namespace: c.cfg.Namespace},
		Client:     c.cfg.Kube.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: c.cfg.Identity},
		Labels:     map[string]string{LabelLease: "shard", LabelShard: strconv.Itoa(shard)},
	}, renewed: func(at time.Time) { c.renewed(e, shard, at) }}
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, LeaseDuration: c.cfg.LeaseDuration, RenewDeadline: c.cfg.RenewDeadline, RetryPeriod: c.cfg.RetryPeriod,
		ReleaseOnCancel: true, Name: LeaseName(shard),
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(lctx context.Context) { c.drive(lctx, e, shard) },
			OnStoppedLeading: func() { c.stop(e, shard) },
		},
	})
	if err != nil {
		c.cfg.Log.Error(err, "Competing for a shard", "shard", shard)
		return e
	}
	go le.Run(ctx)
	return e
}

// fencedLock is a shard's Lease lock that reports each write that took or
// renewed it, timed from before the write was sent.
type fencedLock struct {
	resourcelock.Interface
	renewed func(at time.Time)
}

func (l *fencedLock) Create(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	at := time.Now()
	err := l.Interface.Create(ctx, r)
	if err == nil {
		l.renewed(at)
	}
	return err
}

func (l *fencedLock) Update(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	at := time.Now()
	err := l.Interface.Update(ctx, r)
	if err == nil && r.HolderIdentity == l.Identity() {
		l.renewed(at)
	}
	return err
}

// renewed moves the shard's hold on (a take or a renewal), if the write
// came from the shard's current elector: a stopped elector's late renewal
// gives nothing back.
func (c *Coordinator) renewed(e *elector, shard int, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running[shard] != e {
		return
	}
	if h := c.held[shard]; h != nil {
		h.renewed = at
		return
	}
	c.held[shard] = &hold{renewed: at}
}

// stop ends the elector's hold on the shard at once (the Lease was lost,
// given up, or not renewed in time) and stops it; the next round competes
// again if the shard is still assigned here.
func (c *Coordinator) stop(e *elector, shard int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running[shard] == e {
		c.stopLocked(shard)
	}
}

func (c *Coordinator) stopLocked(shard int) {
	if e := c.running[shard]; e != nil {
		e.cancel()
	}
	delete(c.running, shard)
	delete(c.held, shard)
}

// drive runs while the shard's Lease is held. Drive's context ends as soon
// as the hold does (lost, given up, or past its renew deadline without a
// renewal), before Drive has stopped: nothing new is started for the shard
// from then on.
func (c *Coordinator) drive(lctx context.Context, e *elector, shard int) {
	c.mu.Lock()
	m := c.driving[shard]
	if m == nil {
		m = &sync.Mutex{}
		c.driving[shard] = m
	}
	c.mu.Unlock()
	m.Lock()
	defer m.Unlock()
	ctx, cancel := context.WithCancel(lctx)
	defer cancel()
	if ctx.Err() != nil || !c.Owns(shard) {
		return
	}
	fence, err := c.fence(ctx, shard)
	if err != nil {
		c.cfg.Log.Error(err, "Reading the shard's Lease for its epoch; not driving it", "shard", shard)
		c.stop(e, shard)
		return
	}
	go c.watch(ctx, cancel, e, shard)
	c.cfg.Log.Info("Driving shard", "shard", shard, "leaseTransitions", fence.Transitions)
	c.cfg.Drive(store.WithFence(ctx, fence), shard)
	c.cfg.Log.Info("Stopped driving shard", "shard", shard)
}

// fence is this hold of the shard's Lease as a store fences writes by: the
// Lease's creation time and its leaseTransitions, read back once the hold
// began (a holder's renewals leave them as they are; another holder's take
// moves leaseTransitions on, and a Lease created again moves the time on).
func (c *Coordinator) fence(ctx context.Context, shard int) (store.Fence, error) {
	l, err := c.cfg.Kube.CoordinationV1().Leases(c.cfg.Namespace).Get(ctx, LeaseName(shard), metav1.GetOptions{})
	if err != nil {
		return store.Fence{}, err
	}
	if h := l.Spec.HolderIdentity; h == nil || *h != c.cfg.Identity {
		return store.Fence{}, fmt.Errorf("the Lease is held by %s now", ptr.Deref(h, "nobody"))
	}
	return store.Fence{Lease: c.cfg.Namespace + "/" + l.Name, Created: l.CreationTimestamp.Unix(), Transitions: int64(ptr.Deref(l.Spec.LeaseTransitions, 0))}, nil
}

// watch ends the shard's Drive context at the hold's renew deadline unless
// a renewal has moved it on: the fence does not wait for the leader
// elector to notice.
func (c *Coordinator) watch(ctx context.Context, cancel context.CancelFunc, e *elector, shard int) {
	defer cancel()
	for {
		c.mu.Lock()
		h := c.held[shard]
		var until time.Duration
		if h != nil {
			until = time.Until(h.renewed.Add(c.cfg.RenewDeadline))
		}
		c.mu.Unlock()
		if until <= 0 {
			c.stop(e, shard)
			c.cfg.Log.Info("Shard's Lease not renewed within the renew deadline; stopped driving it", "shard", shard)
			return
		}
		t := time.NewTimer(until)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// leave gives every shard up and removes the member Lease, so the other
// replicas take over without waiting for it to expire.
func (c *Coordinator) leave() {
	c.mu.Lock()
	for s := range c.running {
		c.stopLocked(s)
	}
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = c.cfg.Kube.CoordinationV1().Leases(c.cfg.Namespace).Delete(ctx, MemberLeaseName(c.cfg.Identity), metav1.DeleteOptions{})
}

// LeaseName names a shard's Lease.
func LeaseName(shard int) string { return fmt.Sprintf("agentrun-shard-%d", shard) }

// MemberLeaseName names a replica's member Lease.
func MemberLeaseName(identity string) string {
	h := fnv.New64a()
	h.Write([]byte(identity))
	return fmt.Sprintf("agentrun-member-%016x", h.Sum64())
}

// renewMember says this replica is alive.
func (c *Coordinator) renewMember(ctx context.Context) error {
	leases := c.cfg.Kube.CoordinationV1().Leases(c.cfg.Namespace)
	now := metav1.NewMicroTime(time.Now())
	l, err := leases.Get(ctx, MemberLeaseName(c.cfg.Identity), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		l = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: MemberLeaseName(c.cfg.Identity), Namespace: c.cfg.Namespace, Labels: map[string]string{LabelLease: "member"}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(c.cfg.Identity), LeaseDurationSeconds: ptr.To(int32(c.cfg.LeaseDuration / time.Second)),
				AcquireTime: &now, RenewTime: &now},
		}
		_, err = leases.Create(ctx, l, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	l.Spec.RenewTime = &now
	_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	return err
}

// liveMembers lists the replicas whose member Lease has not expired.
func (c *Coordinator) liveMembers(ctx context.Context) ([]string, error) {
	list, err := c.cfg.Kube.CoordinationV1().Leases(c.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: LabelLease + "=member"})
	if err != nil {
		return nil, err
	}
	var out []string
	now := time.Now()
	for i := range list.Items {
		if holder, live := liveHolder(&list.Items[i].Spec, now); live {
			out = append(out, holder)
		}
	}
	return out, nil
}

// Ownership is who holds which shard, as read from the Leases: for
// showing runs' drivers (kubectl agentrun ps and describe).
type Ownership struct {
	// Sharded: shard Leases exist, so runs are divided among replicas.
	Sharded bool
	// Holders is the live holder of each shard that has one.
	Holders map[int]string
	// LiveMembers counts the live replicas; with some, a shard without a
	// holder is only changing hands.
	LiveMembers int
}

// ReadOwnership reads the operator's Leases at now.
func ReadOwnership(leases []coordinationv1.Lease, now time.Time) Ownership {
	o := Ownership{Holders: map[int]string{}}
	for i := range leases {
		l := &leases[i]
		holder, live := liveHolder(&l.Spec, now)
		switch l.Labels[LabelLease] {
		case "member":
			if live {
				o.LiveMembers++
			}
		case "shard":
			o.Sharded = true
			shard, err := strconv.Atoi(l.Labels[LabelShard])
			if err == nil && live {
				o.Holders[shard] = holder
			}
		}
	}
	return o
}

// liveHolder is a Lease's holder, and whether its hold has not expired.
func liveHolder(s *coordinationv1.LeaseSpec, now time.Time) (string, bool) {
	if s.HolderIdentity == nil || *s.HolderIdentity == "" || s.RenewTime == nil || s.LeaseDurationSeconds == nil {
		return "", false
	}
	return *s.HolderIdentity, now.Before(s.RenewTime.Add(time.Duration(*s.LeaseDurationSeconds) * time.Second))
}
