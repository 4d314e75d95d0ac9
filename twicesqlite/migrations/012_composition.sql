-- 012: composition — continuations, workflows and batches.
--
-- Every edge (a child after its parent, a task after its dependencies, a
-- batch's callback after its last job) is written in the same transaction
-- as the state change that fires it, so it fires exactly once however often
-- the job is delivered: a completion is written only under the running +
-- epoch guard, and only a write that changed the state fires anything.
--
-- Continuations (job.Then) are inserted by JobFinish itself, after its
-- guarded update applied; parent_id records the edge. Workflow and batch
-- edges are fired by the triggers below, on the state change of a job that
-- belongs to a workflow or a batch, so every path that finishes a job
-- (finish, rescue, cancel, retry) keeps them right without knowing of them.
-- The WHEN clauses keep plain jobs free of any trigger body. Jobs the
-- triggers insert are created (and due) when the edge fires, or at the
-- parent's finish time if that is later: never before the write that
-- fired them.
--
-- The triggers are declared on finished_at, not state: every write that
-- moves a job into or out of a finished state sets finished_at (finish,
-- rescue, cancel, discard, retry), while the fetch and the lease heartbeat,
-- which run for every job, do not, so their statements carry no trigger at
-- all. On state, the mere presence of the triggers (their WHEN false for
-- plain jobs) cost plain SQLite jobs about a third of their throughput.
--
-- Additive only: new columns with NULL or '' defaults and new tables.

ALTER TABLE twice_jobs ADD COLUMN parent_id INTEGER;          -- the job whose completion inserted this one
ALTER TABLE twice_jobs ADD COLUMN workflow_id INTEGER;        -- NULL: not a workflow task
ALTER TABLE twice_jobs ADD COLUMN workflow_task TEXT NOT NULL DEFAULT '';
ALTER TABLE twice_jobs ADD COLUMN batch_id INTEGER;           -- NULL: in no batch

CREATE INDEX twice_jobs_parent ON twice_jobs (parent_id) WHERE parent_id IS NOT NULL;
-- One job per workflow task, ever: a second insert of a task would fail.
CREATE UNIQUE INDEX twice_jobs_workflow_task ON twice_jobs (workflow_id, workflow_task)
    WHERE workflow_id IS NOT NULL;
CREATE INDEX twice_jobs_batch ON twice_jobs (batch_id, id) WHERE batch_id IS NOT NULL;

CREATE TABLE twice_workflows (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    name        TEXT    NOT NULL,
    on_dead     TEXT    NOT NULL DEFAULT 'hold' CHECK (on_dead IN ('hold', 'cancel')),
    state       TEXT    NOT NULL DEFAULT 'running'
        CHECK (state IN ('running', 'completed', 'failed', 'cancelled')),
    tasks       INTEGER NOT NULL,
    completed   INTEGER NOT NULL DEFAULT 0,
    dead        INTEGER NOT NULL DEFAULT 0, -- tasks whose job is dead, discarded or cancelled now
    created_at  INTEGER NOT NULL,
    finished_at INTEGER
);
CREATE INDEX twice_workflows_state ON twice_workflows (state, id);

-- A task waits here, with the job it will become, until its last
-- dependency completes: then the trigger inserts its job and marks it
-- enqueued. Root tasks are enqueued with the workflow.
CREATE TABLE twice_workflow_tasks (
    workflow_id     INTEGER NOT NULL REFERENCES twice_workflows (id) ON DELETE CASCADE,
    name            TEXT    NOT NULL,
    pending         INTEGER NOT NULL, -- dependencies not completed yet
    state           TEXT    NOT NULL DEFAULT 'waiting'
        CHECK (state IN ('waiting', 'enqueued', 'cancelled')),
    kind            TEXT    NOT NULL,
    queue           TEXT    NOT NULL,
    priority        INTEGER NOT NULL DEFAULT 0,
    args            BLOB    NOT NULL,
    message_id      TEXT    NOT NULL DEFAULT '',
    idempotency_key TEXT    NOT NULL DEFAULT '',
    correlation_id  TEXT    NOT NULL DEFAULT '',
    max_attempts    INTEGER NOT NULL,
    metadata        TEXT    NOT NULL DEFAULT '{}',
    concurrency_key TEXT    NOT NULL DEFAULT '',
    PRIMARY KEY (workflow_id, name)
);

-- One row per edge, keyed for the question a completion asks: who depends
-- on this task?
CREATE TABLE twice_workflow_deps (
    workflow_id INTEGER NOT NULL REFERENCES twice_workflows (id) ON DELETE CASCADE,
    dep         TEXT    NOT NULL,
    task        TEXT    NOT NULL,
    PRIMARY KEY (workflow_id, dep, task)
);

CREATE TABLE twice_batches (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    on_success      INTEGER NOT NULL DEFAULT 0, -- 1: the callback only when no job is dead or cancelled
    sealed          INTEGER NOT NULL DEFAULT 1, -- 0: open, jobs may still be added
    total           INTEGER NOT NULL DEFAULT 0,
    pending         INTEGER NOT NULL DEFAULT 0,
    completed       INTEGER NOT NULL DEFAULT 0,
    dead            INTEGER NOT NULL DEFAULT 0, -- dead or discarded
    cancelled       INTEGER NOT NULL DEFAULT 0,
    callback_state  INTEGER NOT NULL DEFAULT 0, -- 0 not fired, 1 firing (inside the trigger), 2 fired
    callback_job_id INTEGER,
    kind            TEXT    NOT NULL,           -- the callback job
    queue           TEXT    NOT NULL,
    priority        INTEGER NOT NULL DEFAULT 0,
    args            BLOB    NOT NULL,
    message_id      TEXT    NOT NULL DEFAULT '',
    idempotency_key TEXT    NOT NULL DEFAULT '',
    correlation_id  TEXT    NOT NULL DEFAULT '',
    max_attempts    INTEGER NOT NULL,
    metadata        TEXT    NOT NULL DEFAULT '{}',
    concurrency_key TEXT    NOT NULL DEFAULT '',
    created_at      INTEGER NOT NULL,
    finished_at     INTEGER
);

-- A task's job completed: each dependant has one dependency fewer to wait
-- for, and those left with none are enqueued, in this statement's
-- transaction. The unique (workflow_id, workflow_task) index makes a second
-- insert of a task impossible.
CREATE TRIGGER twice_jobs_workflow_completed AFTER UPDATE OF finished_at ON twice_jobs
WHEN NEW.workflow_id IS NOT NULL AND NEW.state = 'completed' AND OLD.state <> 'completed'
BEGIN
    UPDATE twice_workflow_tasks SET pending = pending - 1
    WHERE workflow_id = NEW.workflow_id AND state = 'waiting' AND name IN (
        SELECT task FROM twice_workflow_deps WHERE workflow_id = NEW.workflow_id AND dep = NEW.workflow_task);
    INSERT INTO twice_jobs (kind, queue, priority, args, message_id, idempotency_key, correlation_id,
        max_attempts, run_at, created_at, metadata, concurrency_key, workflow_id, workflow_task)
    SELECT kind, queue, priority, args, message_id, idempotency_key, correlation_id,
        max_attempts, max(coalesce(NEW.finished_at, 0), CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)), max(coalesce(NEW.finished_at, 0), CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)), metadata, concurrency_key, workflow_id, name
    FROM twice_workflow_tasks
    WHERE workflow_id = NEW.workflow_id AND state = 'waiting' AND pending = 0 AND name IN (
        SELECT task FROM twice_workflow_deps WHERE workflow_id = NEW.workflow_id AND dep = NEW.workflow_task)
    ORDER BY name;
    UPDATE twice_workflow_tasks SET state = 'enqueued'
    WHERE workflow_id = NEW.workflow_id AND state = 'waiting' AND pending = 0 AND name IN (
        SELECT task FROM twice_workflow_deps WHERE workflow_id = NEW.workflow_id AND dep = NEW.workflow_task);
    UPDATE twice_workflows SET completed = completed + 1,
        state = CASE WHEN state = 'running' AND completed + 1 >= tasks THEN 'completed' ELSE state END,
        finished_at = CASE WHEN state = 'running' AND completed + 1 >= tasks THEN NEW.finished_at ELSE finished_at END
    WHERE id = NEW.workflow_id;
END;

-- A task's job failed for good (dead, or cancelled): counted, so the
-- workflow shows as blocked; under on_dead 'cancel' every task downstream
-- of it that still waits is cancelled, and the workflow has failed.
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

-- A failed task's job was retried: the workflow is no longer blocked on it.
CREATE TRIGGER twice_jobs_workflow_retried AFTER UPDATE OF finished_at ON twice_jobs
WHEN NEW.workflow_id IS NOT NULL AND OLD.state IN ('dead', 'discarded', 'cancelled')
    AND NEW.state IN ('available', 'running')
BEGIN
    UPDATE twice_workflows SET dead = max(dead - 1, 0) WHERE id = NEW.workflow_id;
END;

-- A batch job moved between unfinished and finished: the counters follow,
-- and the move that leaves a sealed batch with nothing pending (and, for
-- on_success, nothing failed) inserts the callback, once: callback_state
-- goes 0 → 1 → 2 within this trigger, and only from 0.
CREATE TRIGGER twice_jobs_batch AFTER UPDATE OF finished_at ON twice_jobs
WHEN NEW.batch_id IS NOT NULL
    AND (OLD.state IN ('available', 'running')) <> (NEW.state IN ('available', 'running'))
BEGIN
    UPDATE twice_batches SET
        pending   = pending + CASE WHEN NEW.state IN ('available', 'running') THEN 1 ELSE -1 END,
        completed = completed + (NEW.state = 'completed') - (OLD.state = 'completed'),
        dead      = dead + (NEW.state IN ('dead', 'discarded')) - (OLD.state IN ('dead', 'discarded')),
        cancelled = cancelled + (NEW.state = 'cancelled') - (OLD.state = 'cancelled')
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
