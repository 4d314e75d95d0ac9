-- 003: recurring schedules.
--
-- One row per schedule name, shared by every node's scheduler: the last tick
-- recorded and what became of it. A tick is recorded only when it is later
-- than last_tick_at, which is how several schedulers turn one tick into at
-- most one job. Times are INTEGER unix microseconds (UTC), as in 001.

CREATE TABLE twice_schedules (
    name         TEXT    NOT NULL PRIMARY KEY,
    kind         TEXT    NOT NULL,
    spec         TEXT    NOT NULL,
    last_tick_at INTEGER NOT NULL, -- the tick's time from the spec, not when it ran
    last_outcome TEXT    NOT NULL CHECK (last_outcome IN ('enqueued', 'skipped')),
    last_job_id  INTEGER NOT NULL DEFAULT 0, -- 0 when the tick enqueued nothing; no foreign key: jobs are pruned
    next_at      INTEGER,                    -- NULL when the spec has no next tick
    updated_at   INTEGER NOT NULL
);
