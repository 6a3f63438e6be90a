-- The daily rollup's groups are split in 16 slots by the first character
-- of the run's UID (random in a Kubernetes UID). Runs archived at once
-- (a burst that ends together) added their calls to the same row, and
-- each archive transaction held that row's lock until its commit: the
-- archives, and the final status writes behind them, went one at a time.
-- Now they wait only for the runs of their slot. A report sums the slots
-- (it sums rows already). The rollup is rebuilt from the ledger, which
-- it sums by definition (the rows with in_rollup = 1).

-- +goose Up
CREATE TABLE call_ledger_daily_slotted (
    day               bigint NOT NULL,
    namespace         text NOT NULL,
    agent             text NOT NULL,
    model             text NOT NULL,
    slot              text NOT NULL,
    calls             bigint NOT NULL,
    prompt_tokens     bigint NOT NULL,
    completion_tokens bigint NOT NULL,
    total_tokens      bigint NOT NULL,
    priced_nano_usd   bigint NOT NULL,
    unpriced_calls    bigint NOT NULL,
    PRIMARY KEY (day, namespace, agent, model, slot)
);

INSERT INTO call_ledger_daily_slotted (day, namespace, agent, model, slot, calls, prompt_tokens, completion_tokens, total_tokens, priced_nano_usd, unpriced_calls)
SELECT (at / 86400000000) * 86400000000, namespace, agent, model, substr(run_uid, 1, 1), COUNT(*), SUM(prompt_tokens), SUM(completion_tokens), SUM(total_tokens),
    COALESCE(SUM(cost_nano_usd), 0), SUM(CASE WHEN cost_nano_usd IS NULL THEN 1 ELSE 0 END)
FROM call_ledger
WHERE in_rollup = 1
GROUP BY (at / 86400000000) * 86400000000, namespace, agent, model, substr(run_uid, 1, 1);

DROP TABLE call_ledger_daily;
ALTER TABLE call_ledger_daily_slotted RENAME TO call_ledger_daily;

-- +goose Down
-- Forward-only: the operator never migrates down (a newer schema is refused).
