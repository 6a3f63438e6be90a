package history

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/utils/clock"

	hv1 "github.com/agentrun-dev/agentrun-operator/api/history/v1alpha1"
	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/store"
	"github.com/agentrun-dev/agentrun-operator/internal/store/sqlstore"
)

// MaxPage bounds a page: a list without a limit, or with one above
// MaxPage, gets MaxPage records and a continue token, so no request holds
// the whole archive in memory.
const MaxPage = 1000

// DefaultContinueTTL is how long a continue token is honoured.
const DefaultContinueTTL = time.Hour

var recordsResource = hv1.GroupVersion.WithResource(hv1.ResourceRecords).GroupResource()

// recordsREST serves agentrunrecords: get, list, watch and delete, read
// from the archive.
type recordsREST struct {
	store *sqlstore.Store
	clock clock.PassiveClock
	// key signs continue tokens; ttl bounds their age.
	key   func(context.Context) ([]byte, error)
	ttl   time.Duration
	watch WatchOptions
}

var (
	_ rest.Getter               = (*recordsREST)(nil)
	_ rest.Lister               = (*recordsREST)(nil)
	_ rest.Watcher              = (*recordsREST)(nil)
	_ rest.GracefulDeleter      = (*recordsREST)(nil)
	_ rest.Scoper               = (*recordsREST)(nil)
	_ rest.SingularNameProvider = (*recordsREST)(nil)
)

func (*recordsREST) New() runtime.Object     { return &hv1.AgentRunRecord{} }
func (*recordsREST) NewList() runtime.Object { return &hv1.AgentRunRecordList{} }
func (*recordsREST) Destroy()                {}
func (*recordsREST) NamespaceScoped() bool   { return true }
func (*recordsREST) GetSingularName() string { return "agentrunrecord" }
func (*recordsREST) ShortNames() []string    { return []string{"arr"} }

// Records name no category: kubectl expands a category before it matches
// a resource's names, so a category "agentrun" made `kubectl get agentrun
// NAME` and `kubectl describe agentrun NAME` read records, not runs, once
// the history API was up (TestRunNamesStillMeanRuns).

// find reads the newest record of the name in the request's namespace (a
// name reused by a later run names several records; the newest answers,
// the others are listed with their uid).
func (r *recordsREST) find(ctx context.Context, name string, uid types.UID) (*sqlstore.ArchivedRecord, error) {
	q := sqlstore.RecordQuery{Namespace: genericapirequest.NamespaceValue(ctx), Name: []sqlstore.FieldTerm{{Value: name}}, UID: string(uid), Limit: 1}
	rows, err := r.store.ListRecords(ctx, q)
	if err != nil {
		return nil, storeError(err)
	}
	if len(rows) == 0 {
		return nil, apierrors.NewNotFound(recordsResource, name)
	}
	return &rows[0], nil
}

// Get answers one record.
func (r *recordsREST) Get(ctx context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	row, err := r.find(ctx, name, "")
	if err != nil {
		return nil, err
	}
	return toRecord(row)
}

// List answers a page of records, newest finished first.
func (r *recordsREST) List(ctx context.Context, o *metainternalversion.ListOptions) (runtime.Object, error) {
	ns := genericapirequest.NamespaceValue(ctx)
	now := r.clock.Now()
	q, empty, err := recordQuery(ns, o.LabelSelector, o.FieldSelector, now)
	if err != nil {
		return nil, err
	}
	digest := queryDigest(ns, labelString(o.LabelSelector), fieldString(o.FieldSelector))
	key, err := r.key(ctx)
	if err != nil {
		return nil, storeError(err)
	}
	if o.Continue != "" {
		if q.After, err = decodeToken(key, o.Continue, digest, now, r.ttl); err != nil {
			return nil, err
		}
	}
	newest, err := r.store.NewestArchived(ctx)
	if err != nil {
		return nil, storeError(err)
	}
	list := &hv1.AgentRunRecordList{Items: []hv1.AgentRunRecord{}}
	list.ResourceVersion = strconv.FormatInt(newest, 10)
	if empty {
		return list, nil
	}
	limit := int(o.Limit)
	if limit <= 0 || limit > MaxPage {
		limit = MaxPage
	}
	q.Limit = limit + 1
	// A Table prints a few columns and each row's metadata: summaries
	// serve it (see tablerequests.go).
	q.Summaries = tableRows(ctx)
	rows, err := r.store.ListRecords(ctx, q)
	if err != nil {
		return nil, storeError(err)
	}
	if len(rows) > limit {
		last := rows[limit-1]
		rows = rows[:limit]
		list.Continue = encodeToken(key, pageToken{Query: digest, FinishedAt: last.FinishedAt, UID: last.UID, Issued: now.Unix()})
	}
	list.Items = make([]hv1.AgentRunRecord, 0, len(rows))
	for i := range rows {
		rec, err := toRecord(&rows[i])
		if err != nil {
			return nil, err
		}
		list.Items = append(list.Items, *rec)
	}
	return list, nil
}

// Delete purges a record with its journal and ledger rows (compliance):
// the newest record of the name, or the one whose uid the preconditions
// give.
func (r *recordsREST) Delete(ctx context.Context, name string, validate rest.ValidateObjectFunc, o *metav1.DeleteOptions) (runtime.Object, bool, error) {
	var uid types.UID
	if o != nil && o.Preconditions != nil && o.Preconditions.UID != nil {
		uid = *o.Preconditions.UID
	}
	row, err := r.find(ctx, name, uid)
	if err != nil {
		return nil, false, err
	}
	rec, err := toRecord(row)
	if err != nil {
		return nil, false, err
	}
	if validate != nil {
		if err := validate(ctx, rec); err != nil {
			return nil, false, err
		}
	}
	found, err := r.store.DeleteRecord(ctx, row.UID)
	if err != nil {
		return nil, false, storeError(err)
	}
	if !found {
		return nil, false, apierrors.NewNotFound(recordsResource, name)
	}
	return rec, true, nil
}

// toRecord is an archived row as the API shows it: the run's metadata,
// spec and status as stored, and the archive's own facts. A row read as
// a summary gives what a Table prints (metadata, spec.agent, and the
// status's phase, model, start and usage) and the archive's facts.
func toRecord(row *sqlstore.ArchivedRecord) (*hv1.AgentRunRecord, error) {
	if row.Summary != "" {
		return summaryRecord(row)
	}
	var run arv1.AgentRun
	if err := json.Unmarshal([]byte(row.Record), &run); err != nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("the archived record of %s/%s does not decode: %w", row.Namespace, row.Name, err))
	}
	var children []store.ChildRecord
	if err := json.Unmarshal([]byte(row.Children), &children); err != nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("the archived children of %s/%s do not decode: %w", row.Namespace, row.Name, err))
	}
	rec := newRecord(row, run.ObjectMeta, run.Spec, run.Status)
	for _, c := range children {
		rec.Archive.Children = append(rec.Archive.Children, hv1.RecordChild{Name: c.Name, UID: string(c.UID), Phase: c.Phase})
	}
	return rec, nil
}

// summaryRecord is a row read as a summary, as a Table row needs it.
func summaryRecord(row *sqlstore.ArchivedRecord) (*hv1.AgentRunRecord, error) {
	var sum sqlstore.RecordSummary
	if err := json.Unmarshal([]byte(row.Summary), &sum); err != nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("the archived summary of %s/%s does not decode: %w", row.Namespace, row.Name, err))
	}
	st := arv1.AgentRunStatus{Phase: sum.Status.Phase, Model: sum.Status.Model, StartedAt: sum.Status.StartedAt, Usage: sum.Status.Usage}
	return newRecord(row, sum.Metadata, arv1.AgentRunSpec{Agent: row.Agent}, st), nil
}

// newRecord is the record of row with the run's metadata, spec and status
// (whole, or as much as a summary holds): its archive times, and the
// archive time as its resourceVersion.
func newRecord(row *sqlstore.ArchivedRecord, meta metav1.ObjectMeta, spec arv1.AgentRunSpec, st arv1.AgentRunStatus) *hv1.AgentRunRecord {
	rec := &hv1.AgentRunRecord{
		TypeMeta:   metav1.TypeMeta{APIVersion: hv1.GroupVersion.String(), Kind: "AgentRunRecord"},
		ObjectMeta: meta,
		Spec:       spec,
		Status:     st,
		Archive: hv1.RecordArchive{
			ArchivedAt: metav1.NewTime(time.UnixMicro(row.ArchivedAt).UTC()),
			FinishedAt: metav1.NewTime(time.UnixMicro(row.FinishedAt).UTC()),
			HasOutput:  row.HasOutput,
		},
	}
	rec.ResourceVersion = strconv.FormatInt(row.ArchivedAt, 10)
	rec.ManagedFields = nil
	return rec
}

// storeError is a store failure as an API status: 503 while the database
// is unavailable, 500 otherwise.
func storeError(err error) error {
	if _, ok := err.(apierrors.APIStatus); ok {
		return err
	}
	if isUnavailable(err) {
		return apierrors.NewServiceUnavailable(err.Error())
	}
	return apierrors.NewInternalError(err)
}

// Watch sends the records archived after the resourceVersion given (or
// from now on), as ADDED events.
func (r *recordsREST) Watch(ctx context.Context, o *metainternalversion.ListOptions) (watch.Interface, error) {
	return r.startWatch(ctx, o)
}
