-- Quotas (AgentRunQuota, ClusterAgentRunQuota) counted in the database,
-- in the journal's transactions, so replicas never race past one.
-- quota_usage holds one row per quota, period and resource: used (settled
-- calls, runs started, runs active) and reserved (the worst case of calls
-- in flight). A period is the Unix microsecond its period began, 0 for a
-- running total and for activeRuns, which has no period. Costs are
-- nano-USD. refused is the worst case of the last call the row had no room
-- for (0 once one that large fits again): a new run is not started while
-- such a call could not be made. quota_reservations holds each call's reservation until its
-- completion (or failure, or the run's end) settles it; quota_holds the
-- runs and activeRuns a run's start took, so a start is counted once
-- whoever retries it. Forward-only, like every migration.

-- +goose Up
CREATE TABLE quota_usage (
    quota    text NOT NULL,
    period   bigint NOT NULL,
    resource text NOT NULL,
    used     bigint NOT NULL DEFAULT 0,
    reserved bigint NOT NULL DEFAULT 0,
    calls    bigint NOT NULL DEFAULT 0,
    unpriced bigint NOT NULL DEFAULT 0,
    refused  bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (quota, period, resource)
);

CREATE TABLE quota_reservations (
    run_uid   text NOT NULL,
    seq       bigint NOT NULL,
    quota     text NOT NULL,
    period    bigint NOT NULL,
    resource  text NOT NULL,
    amount    bigint NOT NULL,
    namespace text NOT NULL,
    name      text NOT NULL,
    PRIMARY KEY (run_uid, seq, quota, resource)
);
CREATE INDEX quota_reservations_quota ON quota_reservations (quota);

CREATE TABLE quota_holds (
    run_uid   text NOT NULL,
    quota     text NOT NULL,
    resource  text NOT NULL,
    period    bigint NOT NULL,
    namespace text NOT NULL,
    name      text NOT NULL,
    PRIMARY KEY (run_uid, quota, resource)
);
CREATE INDEX quota_holds_quota ON quota_holds (quota, resource);

-- +goose Down
-- Forward-only: the operator never migrates down (a newer schema is refused).
