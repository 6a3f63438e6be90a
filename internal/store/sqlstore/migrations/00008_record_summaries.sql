-- A record's summary: the run's metadata and the status fields a listing
-- prints (phase, model, start, usage), as JSON, a few hundred bytes
-- beside the whole record. The history API reads it instead of the record
-- when the client asked for a Table (kubectl get), so a page of records
-- decodes no spec, no conditions and no children. Records archived before
-- this version have none (NULL): their listings read the whole record.

-- +goose Up
ALTER TABLE archived_runs ADD COLUMN summary text;

-- +goose Down
-- Forward-only: the operator never migrates down (a newer schema is refused).
