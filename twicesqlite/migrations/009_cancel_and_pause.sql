-- 009: job cancel and queue pause.
--
-- A job can end cancelled: stopped on purpose (by an operator, or by its own
-- handler), waiting for no human, unlike a dead one. An operator's cancel of
-- a running job is a request its worker acts on, so the request (when, by
-- whom, why) is kept on the job; JobExtendLease reports it to the worker.
--
-- SQLite cannot change a CHECK constraint in place, so twice_jobs is
-- rebuilt (SQLite's documented twelve-step procedure, within the
-- migration's transaction): a new table with the wider state check and the
-- cancel columns, the rows copied, the old table dropped, the new one
-- renamed, the indexes made again. The AUTOINCREMENT counter is carried
-- over, so ids of jobs already deleted by retention are never reused (ids
-- are keyset cursors). It copies every job once: on a large database this
-- migration takes a while, under the write lock.
--
-- A job counts its snoozes (which give their attempt back), so one that
-- snoozes forever can be stopped.
--
-- A queue can be paused on every node at once: one row per paused queue,
-- which fetch checks in the same statement that leases jobs. A pause with
-- an until in the past is over.

CREATE TABLE twice_jobs_009 (
    id              INTEGER PRIMARY KEY AUTOINCREMENT, -- never reused: ids are keyset cursors
    kind            TEXT    NOT NULL,
    queue           TEXT    NOT NULL,
    priority        INTEGER NOT NULL DEFAULT 0,
    args            BLOB    NOT NULL,
    message_id      TEXT    NOT NULL DEFAULT '',
    idempotency_key TEXT    NOT NULL DEFAULT '',
    correlation_id  TEXT    NOT NULL DEFAULT '',
    unique_key      TEXT    NOT NULL DEFAULT '',
    state           TEXT    NOT NULL DEFAULT 'available'
        CHECK (state IN ('available', 'running', 'completed', 'dead', 'discarded', 'cancelled')),
    attempt         INTEGER NOT NULL DEFAULT 0,
    max_attempts    INTEGER NOT NULL,
    epoch           INTEGER NOT NULL DEFAULT 0,
    run_at          INTEGER NOT NULL,
    lease_until     INTEGER,
    attempted_by    TEXT    NOT NULL DEFAULT '',
    errors          TEXT    NOT NULL DEFAULT '[]', -- JSON array of attempt errors
    note            TEXT    NOT NULL DEFAULT '',
    created_at      INTEGER NOT NULL,
    finished_at     INTEGER,
    metadata        TEXT    NOT NULL DEFAULT '{}',
    cancel_requested_at INTEGER,                   -- NULL: no cancel asked for
    cancel_by           TEXT NOT NULL DEFAULT '',
    cancel_reason       TEXT NOT NULL DEFAULT '',
    snoozes             INTEGER NOT NULL DEFAULT 0
);

INSERT INTO twice_jobs_009 (id, kind, queue, priority, args, message_id, idempotency_key, correlation_id,
    unique_key, state, attempt, max_attempts, epoch, run_at, lease_until, attempted_by, errors, note,
    created_at, finished_at, metadata)
SELECT id, kind, queue, priority, args, message_id, idempotency_key, correlation_id,
    unique_key, state, attempt, max_attempts, epoch, run_at, lease_until, attempted_by, errors, note,
    created_at, finished_at, metadata
FROM twice_jobs;

-- The copy set the new table's counter to its highest id; the old counter
-- may be higher (the newest jobs were deleted).
UPDATE sqlite_sequence SET seq = (SELECT MAX(seq) FROM sqlite_sequence WHERE name IN ('twice_jobs', 'twice_jobs_009'))
WHERE name = 'twice_jobs_009';
INSERT INTO sqlite_sequence (name, seq)
SELECT 'twice_jobs_009', seq FROM sqlite_sequence
WHERE name = 'twice_jobs' AND NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'twice_jobs_009');

DROP TABLE twice_jobs;
ALTER TABLE twice_jobs_009 RENAME TO twice_jobs;

-- The indexes of 001, as they were.
CREATE INDEX twice_jobs_fetch ON twice_jobs (queue, priority, run_at, id, kind)
    WHERE state = 'available';
CREATE INDEX twice_jobs_rescue ON twice_jobs (lease_until)
    WHERE state = 'running';
CREATE UNIQUE INDEX twice_jobs_unique ON twice_jobs (kind, unique_key)
    WHERE unique_key <> '' AND state IN ('available', 'running');
CREATE INDEX twice_jobs_state_id ON twice_jobs (state, id);
CREATE INDEX twice_jobs_kind_id ON twice_jobs (kind, id);

CREATE TABLE twice_queue_pauses (
    queue     TEXT    NOT NULL PRIMARY KEY,
    paused_at INTEGER NOT NULL,
    until     INTEGER,                    -- NULL: until resumed
    paused_by TEXT    NOT NULL DEFAULT '',
    reason    TEXT    NOT NULL DEFAULT ''
);
