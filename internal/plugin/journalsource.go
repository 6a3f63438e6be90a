package plugin

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hv1 "github.com/agentrun-dev/agentrun-operator/api/history/v1alpha1"
	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/history/historyclient"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/store/configmaps"
)

// A run's journal is in the ConfigMaps it owns or, when its
// status.journalStore is Database, in the operator's database, which the
// plugin reads through the history API's journal subresource as the same
// user (never with database credentials). Every command that works on a
// run's entries reads them here, so none of them reads a database run's
// journal as empty.

// RunJournal reads the run's journal entries, in seq order, wherever they
// are kept: ConfigMaps through c, the database through the history API
// with cfg. An entry that does not decode fails the read.
func RunJournal(ctx context.Context, c client.Reader, cfg *rest.Config, run *arv1.AgentRun) ([]journal.Entry, error) {
	if !inDatabase(run) {
		return configmaps.Read(ctx, c, run.Namespace, run.UID)
	}
	entries, bad, err := databaseJournal(ctx, cfg, run)
	if err == nil && len(bad) > 0 {
		err = fmt.Errorf("the journal of %s/%s holds %d entr(ies) that cannot be read: %s", run.Namespace, run.Name, len(bad), bad[0])
	}
	return entries, err
}

// RunJournalLenient is RunJournal for people: an entry that does not
// decode is described in unreadable instead of failing the read.
func RunJournalLenient(ctx context.Context, c client.Reader, cfg *rest.Config, run *arv1.AgentRun) (entries []journal.Entry, unreadable []string, err error) {
	if !inDatabase(run) {
		return configmaps.ReadLenient(ctx, c, run.Namespace, run.UID)
	}
	return databaseJournal(ctx, cfg, run)
}

// servesRecordsOnly says the history API is served, but without the
// journal subresource (a history server older than the plugin).
func servesRecordsOnly(cfg *rest.Config) bool {
	d, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return false
	}
	list, err := d.ServerResourcesForGroupVersion(hv1.GroupVersion.String())
	if err != nil {
		return false
	}
	records := false
	for _, r := range list.APIResources {
		switch r.Name {
		case hv1.ResourceRecords + "/" + hv1.SubresourceJournal:
			return false
		case hv1.ResourceRecords:
			records = true
		}
	}
	return records
}

// databaseJournal reads the run's entries from the history API. Nothing
// journaled yet reads as no entries: the API then has no journal of the
// name (404), or only an older run's record of it (another uid).
func databaseJournal(ctx context.Context, cfg *rest.Config, run *arv1.AgentRun) ([]journal.Entry, []string, error) {
	h, err := historyclient.New(cfg)
	if err != nil {
		return nil, nil, err
	}
	j, err := h.Journal(ctx, run.Namespace, run.Name)
	if apierrors.IsNotFound(err) && !isMissingAPI(err) {
		return nil, nil, nil
	}
	if isMissingAPI(err) && servesRecordsOnly(cfg) {
		return nil, nil, fmt.Errorf("run %s/%s keeps its journal in the database, and the history API of this cluster does not serve agentrunrecords/journal: its history server is older than this plugin; upgrade it (docs/history.md)", run.Namespace, run.Name)
	}
	if err != nil {
		return nil, nil, historyError(err, run.Namespace, run.Name, false)
	}
	if j.UID != run.UID {
		return nil, nil, nil
	}
	entries := make([]journal.Entry, 0, len(j.Entries))
	var bad []string
	for i, raw := range j.Entries {
		var e journal.Entry
		if err := json.Unmarshal(raw.Raw, &e); err != nil {
			bad = append(bad, fmt.Sprintf("entry %d of the journal of %s/%s: unreadable entry: %v", i, run.Namespace, run.Name, err))
			continue
		}
		entries = append(entries, e)
	}
	slices.SortStableFunc(entries, func(a, b journal.Entry) int { return cmp.Compare(a.Seq, b.Seq) })
	return entries, bad, nil
}
