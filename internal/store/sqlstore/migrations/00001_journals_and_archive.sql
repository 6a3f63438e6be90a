-- The first schema: runs' journals, the shard fences that order their
-- writers, the ledger of model calls, and the archive of finished runs.
-- Times are Unix microseconds (bigint), costs billionths of a US dollar
-- (bigint, NULL when unknown: unknown is never free). The same statements
-- serve PostgreSQL and SQLite (whose type affinity reads bigint as INTEGER).

-- +goose Up
CREATE TABLE run_journals (
    run_uid    text PRIMARY KEY,
    namespace  text NOT NULL,
    name       text NOT NULL,
    created_at bigint NOT NULL,
    output     text
);
CREATE INDEX run_journals_created_at ON run_journals (created_at);

CREATE TABLE journal_entries (
    run_uid text NOT NULL,
    seq     bigint NOT NULL,
    entry   text NOT NULL,
    PRIMARY KEY (run_uid, seq)
);

CREATE TABLE shard_fences (
    lease       text PRIMARY KEY,
    created     bigint NOT NULL,
    transitions bigint NOT NULL
);

CREATE TABLE call_ledger (
    run_uid           text NOT NULL,
    seq               bigint NOT NULL,
    namespace         text NOT NULL,
    provider          text NOT NULL,
    model             text NOT NULL,
    at                bigint NOT NULL,
    prompt_tokens     bigint NOT NULL,
    completion_tokens bigint NOT NULL,
    total_tokens      bigint NOT NULL,
    cost_nano_usd     bigint,
    PRIMARY KEY (run_uid, seq)
);
CREATE INDEX call_ledger_namespace_at ON call_ledger (namespace, at);

CREATE TABLE archived_runs (
    run_uid           text PRIMARY KEY,
    namespace         text NOT NULL,
    name              text NOT NULL,
    agent             text NOT NULL,
    phase             text NOT NULL,
    parent            text NOT NULL,
    labels            text NOT NULL,
    created_at        bigint NOT NULL,
    finished_at       bigint NOT NULL,
    archived_at       bigint NOT NULL,
    prompt_tokens     bigint NOT NULL,
    completion_tokens bigint NOT NULL,
    total_tokens      bigint NOT NULL,
    model_calls       bigint NOT NULL,
    lost_calls        bigint NOT NULL,
    cost_nano_usd     bigint,
    priced_nano_usd   bigint NOT NULL,
    unpriced_calls    bigint NOT NULL,
    model             text NOT NULL,
    record            text NOT NULL,
    children          text NOT NULL,
    output            text
);
CREATE INDEX archived_runs_namespace_finished ON archived_runs (namespace, finished_at, run_uid);
CREATE INDEX archived_runs_finished ON archived_runs (finished_at);

-- +goose Down
-- Forward-only: the operator never migrates down (a newer schema is refused).
