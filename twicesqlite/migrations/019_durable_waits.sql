-- 019: durable waits (twicestore.WaitExecutor).
--
-- A handler can park its job: the job leaves running for the new state
-- 'waiting', holding no lease and no concurrency slot, until a signal of
-- the name in wait_name arrives or its timer (run_at) fires. signal_seq
-- counts the signals stored for the job and the timers that fired for it:
-- a park carries the count its delivery was fetched with, and one that
-- grew since makes the job available at once instead, so a signal sent
-- while the handler decided to park is never lost.
--
-- SQLite cannot change a CHECK constraint in place, so twice_jobs is
-- rebuilt as 009 rebuilt it (SQLite's documented procedure, within the
-- migration's transaction): a new table with the wider state check and
-- the two new columns, every row copied, the old table dropped, the new
-- one renamed, and every index and trigger the table had made again. The
-- AUTOINCREMENT counter is carried over, so ids of jobs retention already
-- deleted are never reused (ids are keyset cursors). It copies every job
-- once: on a large database this migration takes a while, under the
-- write lock.
--
-- A waiting job is unfinished: it keeps its unique key as a running one
-- does (the running bit, 2, of twicetype.UniqueStates), and the batch and
-- workflow triggers count it among a batch's pending jobs, as they count
-- available and running ones. Only the triggers' state lists change; a
-- park, which JobFinish writes with finished_at NULL, fires them with a
-- move from running to waiting, which changes no counter.

CREATE TABLE twice_jobs_019 (
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
        CHECK (state IN ('available', 'running', 'waiting', 'completed', 'dead', 'discarded', 'cancelled')),
    attempt         INTEGER NOT NULL DEFAULT 0,
    max_attempts    INTEGER NOT NULL,
    epoch           INTEGER NOT NULL DEFAULT 0,
    run_at          INTEGER NOT NULL,               -- a waiting job: when its timer fires
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
    snoozes             INTEGER NOT NULL DEFAULT 0,
    concurrency_key TEXT    NOT NULL DEFAULT '',
    parent_id       INTEGER,                       -- the job whose completion inserted this one
    workflow_id     INTEGER,                       -- NULL: not a workflow task
    workflow_task   TEXT    NOT NULL DEFAULT '',
    batch_id        INTEGER,                       -- NULL: in no batch
    output          TEXT,
    unique_states   INTEGER NOT NULL DEFAULT 3,
    trace           TEXT    NOT NULL DEFAULT '',
    wait_name       TEXT    NOT NULL DEFAULT '',   -- the wait the job last parked on; '' when it never parked
    signal_seq      INTEGER NOT NULL DEFAULT 0     -- signals stored for the job and timers fired for it
);

INSERT INTO twice_jobs_019 (id, kind, queue, priority, args, message_id, idempotency_key, correlation_id,
    unique_key, state, attempt, max_attempts, epoch, run_at, lease_until, attempted_by, errors, note,
    created_at, finished_at, metadata, cancel_requested_at, cancel_by, cancel_reason, snoozes,
    concurrency_key, parent_id, workflow_id, workflow_task, batch_id, output, unique_states, trace)
SELECT id, kind, queue, priority, args, message_id, idempotency_key, correlation_id,
    unique_key, state, attempt, max_attempts, epoch, run_at, lease_until, attempted_by, errors, note,
    created_at, finished_at, metadata, cancel_requested_at, cancel_by, cancel_reason, snoozes,
    concurrency_key, parent_id, workflow_id, workflow_task, batch_id, output, unique_states, trace
FROM twice_jobs;

-- The copy set the new table's counter to its highest id; the old counter
-- may be higher (the newest jobs were deleted).
UPDATE sqlite_sequence SET seq = (SELECT MAX(seq) FROM sqlite_sequence WHERE name IN ('twice_jobs', 'twice_jobs_019'))
WHERE name = 'twice_jobs_019';
INSERT INTO sqlite_sequence (name, seq)
SELECT 'twice_jobs_019', seq FROM sqlite_sequence
WHERE name = 'twice_jobs' AND NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'twice_jobs_019');

DROP TABLE twice_jobs;
DELETE FROM sqlite_sequence WHERE name = 'twice_jobs';
ALTER TABLE twice_jobs_019 RENAME TO twice_jobs;

-- The indexes of 001, 011 and 012, as they were.
CREATE INDEX twice_jobs_fetch ON twice_jobs (queue, priority, run_at, id, kind)
    WHERE state = 'available';
CREATE INDEX twice_jobs_state_id ON twice_jobs (state, id);
CREATE INDEX twice_jobs_kind_id ON twice_jobs (kind, id);
CREATE INDEX twice_jobs_running_kind ON twice_jobs (kind) WHERE state = 'running';
CREATE INDEX twice_jobs_concurrency_key ON twice_jobs (kind, concurrency_key, id)
    WHERE concurrency_key <> '' AND state IN ('available', 'running');
CREATE INDEX twice_jobs_parent ON twice_jobs (parent_id) WHERE parent_id IS NOT NULL;
CREATE UNIQUE INDEX twice_jobs_workflow_task ON twice_jobs (workflow_id, workflow_task)
    WHERE workflow_id IS NOT NULL;
CREATE INDEX twice_jobs_batch ON twice_jobs (batch_id, id) WHERE batch_id IS NOT NULL;

-- 014's unique index, with a waiting job holding its key under the
-- running bit. The queries repeat this predicate word for word
-- (driverkit.UniqueHeldSQL), so the planner can use the partial index.
CREATE UNIQUE INDEX twice_jobs_unique ON twice_jobs (kind, unique_key)
    WHERE unique_key <> '' AND (unique_states & CASE state WHEN 'available' THEN 1 WHEN 'running' THEN 2
        WHEN 'waiting' THEN 2 WHEN 'completed' THEN 4 WHEN 'dead' THEN 8 WHEN 'discarded' THEN 16
        WHEN 'cancelled' THEN 32 ELSE 0 END) <> 0;

-- The timers: JobWakeDue reads the waiting jobs whose run_at has passed,
-- oldest first, and stops at its limit. Partial, so it holds only the
-- jobs that wait.
CREATE INDEX twice_jobs_wait_due ON twice_jobs (run_at, id) WHERE state = 'waiting';

-- One resolution per wait of a job: the first signal of the name, or the
-- timeout (timed_out 1, payload NULL, at the time the timer was due). The
-- primary key settles a signal racing the timer: whichever inserts first
-- is the resolution, the other finds it. payload is the signal's JSON as
-- sent; at is unix microseconds, as everywhere.
CREATE TABLE twice_signals (
    job_id    INTEGER NOT NULL,
    name      TEXT    NOT NULL,
    payload   TEXT,                         -- NULL for a timeout
    timed_out INTEGER NOT NULL DEFAULT 0 CHECK (timed_out IN (0, 1)),
    at        INTEGER NOT NULL,
    sender    TEXT    NOT NULL DEFAULT '',
    PRIMARY KEY (job_id, name)
) WITHOUT ROWID;

-- A job's signals leave with it, whatever deletes it (retention, a delete
-- by hand), in the statement that deletes it. Every stored resolution grew
-- the job's signal_seq in its own write, so a job whose count is 0 has
-- none, and the deletes of plain jobs run no trigger body.
CREATE TRIGGER twice_jobs_signals_deleted AFTER DELETE ON twice_jobs
WHEN OLD.signal_seq > 0
BEGIN
    DELETE FROM twice_signals WHERE job_id = OLD.id;
END;

-- The triggers of 012, 015 and 018, with 'waiting' among the unfinished
-- states wherever available and running are.
CREATE TRIGGER twice_jobs_workflow_failed AFTER UPDATE OF finished_at ON twice_jobs
WHEN NEW.workflow_id IS NOT NULL AND NEW.state IN ('dead', 'cancelled')
    AND OLD.state NOT IN ('dead', 'discarded', 'cancelled')
BEGIN
    UPDATE twice_workflows SET dead = dead + 1,
        state = CASE WHEN state = 'running' AND on_dead = 'cancel' THEN 'failed' ELSE state END,
        finished_at = CASE WHEN state = 'running' AND on_dead = 'cancel' THEN NEW.finished_at ELSE finished_at END
    WHERE id = NEW.workflow_id;
    UPDATE twice_workflow_tasks SET state = 'cancelled'
    WHERE workflow_id = NEW.workflow_id AND state = 'waiting'
      AND (SELECT on_dead FROM twice_workflows WHERE id = NEW.workflow_id) = 'cancel'
      AND name IN (
        WITH RECURSIVE down(name) AS (
            SELECT task FROM twice_workflow_deps WHERE workflow_id = NEW.workflow_id AND dep = NEW.workflow_task
            UNION
            SELECT d.task FROM twice_workflow_deps AS d JOIN down ON d.dep = down.name
            WHERE d.workflow_id = NEW.workflow_id)
        SELECT name FROM down);
END;

CREATE TRIGGER twice_jobs_workflow_retried AFTER UPDATE OF finished_at ON twice_jobs
WHEN NEW.workflow_id IS NOT NULL AND OLD.state IN ('dead', 'discarded', 'cancelled')
    AND NEW.state IN ('available', 'running', 'waiting')
BEGIN
    UPDATE twice_workflows SET dead = max(dead - 1, 0) WHERE id = NEW.workflow_id;
END;

CREATE TRIGGER twice_jobs_batch AFTER UPDATE OF finished_at ON twice_jobs
WHEN NEW.batch_id IS NOT NULL
    AND (OLD.state IN ('available', 'running', 'waiting')) <> (NEW.state IN ('available', 'running', 'waiting'))
BEGIN
    UPDATE twice_batches SET
        pending   = pending + CASE WHEN NEW.state IN ('available', 'running', 'waiting') THEN 1 ELSE -1 END,
        completed = completed + (NEW.state = 'completed') - (OLD.state = 'completed'),
        dead      = dead + (NEW.state IN ('dead', 'discarded')) - (OLD.state IN ('dead', 'discarded')),
        cancelled = cancelled + (NEW.state = 'cancelled') - (OLD.state = 'cancelled'),
        finished_at = CASE WHEN callback_state <> 0 THEN finished_at
            WHEN sealed = 1 AND pending + CASE WHEN NEW.state IN ('available', 'running', 'waiting') THEN 1 ELSE -1 END = 0
            THEN coalesce(finished_at, max(coalesce(NEW.finished_at, 0), CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)))
            END
    WHERE id = NEW.batch_id;
    UPDATE twice_batches SET callback_state = 1, finished_at = max(coalesce(NEW.finished_at, 0), CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER))
    WHERE id = NEW.batch_id AND callback_state = 0 AND sealed = 1 AND pending = 0
      AND (on_success = 0 OR (dead = 0 AND cancelled = 0));
    INSERT INTO twice_jobs (kind, queue, priority, args, message_id, idempotency_key, correlation_id,
        max_attempts, run_at, created_at, metadata, concurrency_key, parent_id)
    SELECT kind, queue, priority, args, message_id, idempotency_key, correlation_id,
        max_attempts, finished_at, finished_at, metadata, concurrency_key, NEW.id
    FROM twice_batches WHERE id = NEW.batch_id AND callback_state = 1;
    UPDATE twice_batches SET callback_state = 2, callback_job_id = last_insert_rowid()
    WHERE id = NEW.batch_id AND callback_state = 1;
END;

CREATE TRIGGER twice_jobs_batch_deleted AFTER DELETE ON twice_jobs
WHEN OLD.batch_id IS NOT NULL AND OLD.state IN ('available', 'running', 'waiting')
BEGIN
    UPDATE twice_batches SET pending = pending - 1, cancelled = cancelled + 1,
        finished_at = CASE WHEN callback_state <> 0 THEN finished_at
            WHEN sealed = 1 AND pending = 1
            THEN coalesce(finished_at, CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)) END
    WHERE id = OLD.batch_id;
    UPDATE twice_batches SET callback_state = 1
    WHERE id = OLD.batch_id AND callback_state = 0 AND sealed = 1 AND pending = 0 AND on_success = 0;
    INSERT INTO twice_jobs (kind, queue, priority, args, message_id, idempotency_key, correlation_id,
        max_attempts, run_at, created_at, metadata, concurrency_key, parent_id)
    SELECT kind, queue, priority, args, message_id, idempotency_key, correlation_id,
        max_attempts, finished_at, finished_at, metadata, concurrency_key, OLD.id
    FROM twice_batches WHERE id = OLD.batch_id AND callback_state = 1;
    UPDATE twice_batches SET callback_state = 2, callback_job_id = last_insert_rowid()
    WHERE id = OLD.batch_id AND callback_state = 1;
END;

CREATE TRIGGER twice_jobs_workflow_deleted AFTER DELETE ON twice_jobs
WHEN OLD.workflow_id IS NOT NULL AND OLD.state IN ('available', 'running', 'waiting')
BEGIN
    UPDATE twice_workflows SET dead = dead + 1,
        state = CASE WHEN state = 'running' AND on_dead = 'cancel' THEN 'failed' ELSE state END,
        finished_at = CASE WHEN state = 'running' AND on_dead = 'cancel'
            THEN CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER) ELSE finished_at END
    WHERE id = OLD.workflow_id;
    UPDATE twice_workflow_tasks SET state = 'cancelled'
    WHERE workflow_id = OLD.workflow_id AND state = 'waiting'
      AND (SELECT on_dead FROM twice_workflows WHERE id = OLD.workflow_id) = 'cancel'
      AND name IN (
        WITH RECURSIVE down(name) AS (
            SELECT task FROM twice_workflow_deps WHERE workflow_id = OLD.workflow_id AND dep = OLD.workflow_task
            UNION
            SELECT d.task FROM twice_workflow_deps AS d JOIN down ON d.dep = down.name
            WHERE d.workflow_id = OLD.workflow_id)
        SELECT name FROM down);
END;

-- 018's release of a workflow task's dependants, as it was.
CREATE TRIGGER twice_jobs_workflow_completed AFTER UPDATE OF finished_at ON twice_jobs
WHEN NEW.workflow_id IS NOT NULL AND NEW.state = 'completed' AND OLD.state <> 'completed'
BEGIN
    UPDATE twice_workflow_tasks SET pending = pending - 1
    WHERE workflow_id = NEW.workflow_id AND state = 'waiting' AND name IN (
        SELECT task FROM twice_workflow_deps WHERE workflow_id = NEW.workflow_id AND dep = NEW.workflow_task);
    INSERT INTO twice_jobs (kind, queue, priority, args, message_id, idempotency_key, correlation_id,
        max_attempts, run_at, created_at, metadata, concurrency_key, workflow_id, workflow_task, trace)
    SELECT t.kind, t.queue, t.priority, t.args, t.message_id, t.idempotency_key, t.correlation_id,
        t.max_attempts,
        max(coalesce(t.run_at, 0), coalesce(NEW.finished_at, 0), CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)),
        max(coalesce(NEW.finished_at, 0), CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)),
        t.metadata, t.concurrency_key, t.workflow_id, t.name,
        coalesce((SELECT group_concat(trace, ',') FROM (
            SELECT j.trace FROM twice_workflow_deps AS d
            JOIN twice_jobs AS j ON j.workflow_id = NEW.workflow_id AND j.workflow_task = d.dep
            WHERE d.workflow_id = NEW.workflow_id AND d.task = t.name AND j.trace <> ''
            ORDER BY j.workflow_task)), '')
    FROM twice_workflow_tasks AS t
    WHERE t.workflow_id = NEW.workflow_id AND t.state = 'waiting' AND t.pending = 0 AND t.name IN (
        SELECT task FROM twice_workflow_deps WHERE workflow_id = NEW.workflow_id AND dep = NEW.workflow_task)
    ORDER BY t.name;
    UPDATE twice_workflow_tasks SET state = 'enqueued'
    WHERE workflow_id = NEW.workflow_id AND state = 'waiting' AND pending = 0 AND name IN (
        SELECT task FROM twice_workflow_deps WHERE workflow_id = NEW.workflow_id AND dep = NEW.workflow_task);
    UPDATE twice_workflows SET completed = completed + 1,
        state = CASE WHEN state = 'running' AND completed + 1 >= tasks THEN 'completed' ELSE state END,
        finished_at = CASE WHEN state = 'running' AND completed + 1 >= tasks THEN NEW.finished_at ELSE finished_at END
    WHERE id = NEW.workflow_id;
END;
