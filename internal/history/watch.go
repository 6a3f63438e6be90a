package history

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	"k8s.io/apimachinery/pkg/watch"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/agentrun-dev/agentrun-operator/internal/store"
	"github.com/agentrun-dev/agentrun-operator/internal/store/sqlstore"
)

// WatchOptions say how a watch finds new records. It polls: every
// Interval each watch asks the database for records archived after the
// newest it has sent (an index look-up on archived_at that finds nothing
// most of the time), the same on PostgreSQL and SQLite. A record whose
// transaction commits late carries an archived_at up to one store
// operation's bound in the past, so each poll looks back Lag and skips
// what it has sent.
type WatchOptions struct {
	// Interval between polls (DefaultWatchInterval when 0).
	Interval time.Duration
	// Lag is how far back a poll looks (DefaultWatchLag when 0).
	Lag time.Duration
}

// Defaults of WatchOptions.
const (
	DefaultWatchInterval = 2 * time.Second
	DefaultWatchLag      = sqlstore.DefaultOpTimeout + time.Second
	watchBatch           = 500
)

func (o WatchOptions) withDefaults() WatchOptions {
	if o.Interval <= 0 {
		o.Interval = DefaultWatchInterval
	}
	if o.Lag <= 0 {
		o.Lag = DefaultWatchLag
	}
	return o
}

func (r *recordsREST) startWatch(ctx context.Context, o *metainternalversion.ListOptions) (watch.Interface, error) {
	if o.SendInitialEvents != nil && *o.SendInitialEvents {
		return nil, apierrors.NewBadRequest("sendInitialEvents is not supported by agentrunrecords: list, then watch from the list's resourceVersion")
	}
	q, empty, err := recordQuery(genericapirequest.NamespaceValue(ctx), o.LabelSelector, o.FieldSelector, r.clock.Now())
	if err != nil {
		return nil, err
	}
	var from int64
	switch o.ResourceVersion {
	case "", "0":
		if from, err = r.store.NewestArchived(ctx); err != nil {
			return nil, storeError(err)
		}
	default:
		if from, err = strconv.ParseInt(o.ResourceVersion, 10, 64); err != nil || from < 0 {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("resourceVersion %q is not one this API gave (a list's metadata.resourceVersion)", o.ResourceVersion))
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	p := &poller{rest: r, q: q, floor: from, cursor: from, sent: map[string]int64{}, ch: make(chan watch.Event), cancel: cancel, opts: r.watch.withDefaults()}
	if empty {
		go func() { <-ctx.Done(); close(p.ch) }()
		return p, nil
	}
	go p.run(ctx)
	return p, nil
}

// poller is one watch.
type poller struct {
	rest *recordsREST
	q    sqlstore.RecordQuery
	opts WatchOptions
	// floor: records archived at or before it were in the list the watch
	// continues; cursor: the newest archived_at sent.
	floor, cursor int64
	// sent are the records sent in the look-back window, by uid and
	// archived_at.
	sent   map[string]int64
	ch     chan watch.Event
	cancel context.CancelFunc
	once   sync.Once
}

func (p *poller) Stop()                          { p.once.Do(p.cancel) }
func (p *poller) ResultChan() <-chan watch.Event { return p.ch }

func (p *poller) run(ctx context.Context) {
	defer close(p.ch)
	t := time.NewTicker(p.opts.Interval)
	defer t.Stop()
	for {
		full, err := p.poll(ctx)
		if err != nil && ctx.Err() == nil && !errors.Is(err, store.ErrUnavailable) {
			p.send(ctx, watch.Event{Type: watch.Error, Object: &apierrors.NewInternalError(err).ErrStatus})
			return
		}
		if full {
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// poll sends what was archived since the last poll; full says a batch
// was full, so more may be waiting.
func (p *poller) poll(ctx context.Context) (bool, error) {
	q := p.q
	q.ArchivedAfter = max(p.floor, p.cursor-p.opts.Lag.Microseconds())
	q.Limit = watchBatch
	rows, err := p.rest.store.ListRecords(ctx, q)
	if err != nil {
		return false, err
	}
	fresh := 0
	for i := range rows {
		row := &rows[i]
		if at, ok := p.sent[row.UID]; ok && at == row.ArchivedAt {
			continue
		}
		rec, err := toRecord(row)
		if err != nil {
			return false, err
		}
		if !p.send(ctx, watch.Event{Type: watch.Added, Object: rec}) {
			return false, ctx.Err()
		}
		fresh++
		p.sent[row.UID] = row.ArchivedAt
		p.cursor = max(p.cursor, row.ArchivedAt)
	}
	for uid, at := range p.sent {
		if at <= p.cursor-p.opts.Lag.Microseconds() {
			delete(p.sent, uid)
		}
	}
	return len(rows) == watchBatch && fresh > 0, nil
}

func (p *poller) send(ctx context.Context, e watch.Event) bool {
	select {
	case p.ch <- e:
		return true
	case <-ctx.Done():
		return false
	}
}
