-- 009: job cancel and queue pause.
--
-- A job can end cancelled: stopped on purpose (by an operator, or by its own
-- handler), waiting for no human, unlike a dead one. An operator's cancel of
-- a running job is a request its worker acts on, so the request (when, by
-- whom, why) is kept on the job; JobExtendLease reports it to the worker.
--
-- A job counts its snoozes (which give their attempt back), so one that
-- snoozes forever can be stopped.
--
-- A queue can be paused on every node at once: one row per paused queue,
-- which fetch checks in the same statement that leases jobs. A pause with
-- an until in the past is over.

ALTER TABLE twice_jobs DROP CONSTRAINT IF EXISTS twice_jobs_state_check;
ALTER TABLE twice_jobs ADD CONSTRAINT twice_jobs_state_check
    CHECK (state IN ('available', 'running', 'completed', 'dead', 'discarded', 'cancelled'));

ALTER TABLE twice_jobs
    ADD COLUMN cancel_requested_at timestamptz, -- NULL: no cancel asked for
    ADD COLUMN cancel_by           text NOT NULL DEFAULT '',
    ADD COLUMN cancel_reason       text NOT NULL DEFAULT '',
    ADD COLUMN snoozes             integer NOT NULL DEFAULT 0;

CREATE TABLE twice_queue_pauses (
    queue     text        NOT NULL PRIMARY KEY,
    paused_at timestamptz NOT NULL,
    until     timestamptz,                 -- NULL: until resumed
    paused_by text        NOT NULL DEFAULT '',
    reason    text        NOT NULL DEFAULT ''
);
