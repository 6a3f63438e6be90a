-- What the history API (history.agentrun.dev, internal/history) reads
-- fast: archived runs' labels, one row per label, so a label selector is
-- an index look-up rather than a scan of every record's labels; the
-- archive and the ledger in time order across namespaces, the ledger by
-- agent; and the key
-- that signs the API's continue tokens, shared by every replica.
-- Records archived before this version have no label rows (the archive
-- was unreleased then); Archive writes them from now on.

-- +goose Up
CREATE TABLE archived_run_labels (
    run_uid     text NOT NULL,
    namespace   text NOT NULL,
    label_key   text NOT NULL,
    label_value text NOT NULL,
    PRIMARY KEY (run_uid, label_key)
);
CREATE INDEX archived_run_labels_selector ON archived_run_labels (namespace, label_key, label_value);

CREATE INDEX archived_runs_finished_uid ON archived_runs (finished_at, run_uid);
CREATE INDEX archived_runs_archived ON archived_runs (archived_at);
CREATE INDEX archived_runs_name ON archived_runs (namespace, name, finished_at);
CREATE INDEX archived_runs_phase ON archived_runs (namespace, phase, finished_at, run_uid);
CREATE INDEX call_ledger_at ON call_ledger (at);
-- The journal of a run not archived yet, by its name (transcripts of live
-- runs whose journal is in the database).
CREATE INDEX run_journals_name ON run_journals (namespace, name, created_at);

-- A call's agent (its run's spec.agent), written when the run is
-- archived, so the cost report groups by agent without joining the
-- archive's wide rows; '' for runs not archived yet.
ALTER TABLE call_ledger ADD COLUMN agent text NOT NULL DEFAULT '';

CREATE TABLE history_keys (
    name       text PRIMARY KEY,
    secret     text NOT NULL,
    created_at bigint NOT NULL
);

-- +goose Down
-- Forward-only: the operator never migrates down (a newer schema is refused).
