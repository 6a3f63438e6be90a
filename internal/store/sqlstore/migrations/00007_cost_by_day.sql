-- The cost report reads a daily rollup of the call ledger instead of
-- summing every call: call_ledger_daily holds, per UTC day (its start in
-- Unix microseconds), namespace, agent and model, the calls, their tokens,
-- the priced calls' cost (nano-USD) and the count of calls whose cost is
-- unknown (counted apart, never summed as 0).
--
-- A call enters the rollup when its run is archived (in the archive's
-- transaction, with the run's agent), not when it is journaled: appends
-- of concurrent runs would otherwise all wait on their day's row.
-- call_ledger.in_rollup says which rows are summed there (1) and which
-- the report still reads one by one (0: runs not archived yet, few, found
-- through a partial index). A record deleted or swept takes its calls out
-- of the rollup in the same transaction; a group left with no call is
-- deleted. Existing rows of archived runs (an agent written) are rolled
-- up here; the others, of runs in flight, wait for their archive.

-- +goose Up
CREATE TABLE call_ledger_daily (
    day               bigint NOT NULL,
    namespace         text NOT NULL,
    agent             text NOT NULL,
    model             text NOT NULL,
    calls             bigint NOT NULL,
    prompt_tokens     bigint NOT NULL,
    completion_tokens bigint NOT NULL,
    total_tokens      bigint NOT NULL,
    priced_nano_usd   bigint NOT NULL,
    unpriced_calls    bigint NOT NULL,
    PRIMARY KEY (day, namespace, agent, model)
);

-- DEFAULT 1: existing rows need no rewrite; the ledger's inserts say 0.
ALTER TABLE call_ledger ADD COLUMN in_rollup smallint NOT NULL DEFAULT 1;
UPDATE call_ledger SET in_rollup = 0 WHERE agent = '';
CREATE INDEX call_ledger_not_rolled_up ON call_ledger (at) WHERE in_rollup = 0;

INSERT INTO call_ledger_daily (day, namespace, agent, model, calls, prompt_tokens, completion_tokens, total_tokens, priced_nano_usd, unpriced_calls)
SELECT (at / 86400000000) * 86400000000, namespace, agent, model, COUNT(*), SUM(prompt_tokens), SUM(completion_tokens), SUM(total_tokens),
    COALESCE(SUM(cost_nano_usd), 0), SUM(CASE WHEN cost_nano_usd IS NULL THEN 1 ELSE 0 END)
FROM call_ledger
WHERE in_rollup = 1
GROUP BY (at / 86400000000) * 86400000000, namespace, agent, model;

-- +goose Down
-- Forward-only: the operator never migrates down (a newer schema is refused).
