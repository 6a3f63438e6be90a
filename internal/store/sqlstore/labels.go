package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"slices"
	"strings"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

// indexForHistory writes what the history API reads fast, in the
// archive's transaction: the run's labels into archived_run_labels, one
// row per label (label selectors read them through an index; an earlier
// attempt's rows are replaced), and its agent into its ledger rows, which
// enter the daily rollup (the cost report groups by agent without joining
// the archive).
func (s *Store) indexForHistory(ctx context.Context, tx *sql.Tx, run *arv1.AgentRun) error {
	if _, err := tx.ExecContext(ctx, s.q("DELETE FROM archived_run_labels WHERE run_uid = $1"), string(run.UID)); err != nil {
		return err
	}
	if len(run.Labels) > 0 {
		keys := slices.Sorted(maps.Keys(run.Labels))
		// One statement for every label: a round trip each cost more
		// than the rows.
		rows := make([]string, 0, len(keys))
		args := make([]any, 0, 2+2*len(keys))
		args = append(args, string(run.UID), run.Namespace)
		for _, k := range keys {
			rows = append(rows, fmt.Sprintf("($1, $2, $%d, $%d)", len(args)+1, len(args)+2))
			args = append(args, k, run.Labels[k])
		}
		if _, err := tx.ExecContext(ctx, s.q("INSERT INTO archived_run_labels (run_uid, namespace, label_key, label_value) VALUES "+strings.Join(rows, ", ")), args...); err != nil {
			return err
		}
	}
	// Last: the rollup's row is shared with the other runs of its slot,
	// and its lock is held from here to the commit.
	return s.rollUpRun(ctx, tx, string(run.UID), run.Spec.Agent)
}
