package sqlstore

import (
	"context"
	"database/sql"
	"sort"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

// indexForHistory writes what the history API reads fast, in the
// archive's transaction: the run's labels into archived_run_labels, one
// row per label (label selectors read them through an index; an earlier
// attempt's rows are replaced), and its agent into its ledger rows, which
// enter the daily rollup (the cost report groups by agent without joining
// the archive).
func (s *Store) indexForHistory(ctx context.Context, tx *sql.Tx, run *arv1.AgentRun) error {
	if err := s.rollUpRun(ctx, tx, string(run.UID), run.Spec.Agent); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, s.q("DELETE FROM archived_run_labels WHERE run_uid = $1"), string(run.UID)); err != nil {
		return err
	}
	keys := make([]string, 0, len(run.Labels))
	for k := range run.Labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if _, err := tx.ExecContext(ctx, s.q("INSERT INTO archived_run_labels (run_uid, namespace, label_key, label_value) VALUES ($1, $2, $3, $4)"),
			string(run.UID), run.Namespace, k, run.Labels[k]); err != nil {
			return err
		}
	}
	return nil
}
