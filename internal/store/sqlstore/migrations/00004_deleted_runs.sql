-- A run deleted before it finished (or before its archive write
-- succeeded) leaves its journal behind with no record to sweep it by:
-- deleted_at marks it, and the archive's sweep removes such journals
-- once they are older than the retention.

-- +goose Up
ALTER TABLE run_journals ADD COLUMN deleted_at bigint;
CREATE INDEX run_journals_deleted_at ON run_journals (deleted_at);

-- +goose Down
-- Forward-only: the operator never migrates down (a newer schema is refused).
