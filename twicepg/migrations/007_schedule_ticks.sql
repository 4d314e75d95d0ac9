-- 007: the recent ticks of each recurring schedule.
--
-- twice_schedules keeps only the last tick; this keeps the newest few of
-- each schedule (the store deletes older ones as it records new ones), so
-- an operator sees the skipped ticks among the enqueued ones.

CREATE TABLE twice_schedule_ticks (
    name        TEXT        NOT NULL,
    tick_at     TIMESTAMPTZ NOT NULL,
    outcome     TEXT        NOT NULL CHECK (outcome IN ('enqueued', 'skipped')),
    job_id      BIGINT      NOT NULL DEFAULT 0,
    recorded_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (name, tick_at)
);
