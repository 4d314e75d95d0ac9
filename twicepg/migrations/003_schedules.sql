-- 003: recurring schedules.
--
-- One row per schedule name, shared by every node's scheduler: the last tick
-- recorded and what became of it. A tick is recorded only when it is later
-- than last_tick_at, which is how several schedulers turn one tick into at
-- most one job: their upserts serialise on the row. Like every table, it
-- lives in the current schema.

CREATE TABLE twice_schedules (
    name         text        NOT NULL PRIMARY KEY,
    kind         text        NOT NULL,
    spec         text        NOT NULL,
    last_tick_at timestamptz NOT NULL, -- the tick's time from the spec, not when it ran
    last_outcome text        NOT NULL CHECK (last_outcome IN ('enqueued', 'skipped')),
    last_job_id  bigint      NOT NULL DEFAULT 0, -- 0 when the tick enqueued nothing; no foreign key: jobs are pruned
    next_at      timestamptz,                    -- NULL when the spec has no next tick
    updated_at   timestamptz NOT NULL
);
