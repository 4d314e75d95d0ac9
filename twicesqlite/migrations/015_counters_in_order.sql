-- 015: a batch that will get no callback still finishes; deleted jobs
-- count.
--
-- (On PostgreSQL, its 016 also applies the counters of a statement in batch and
-- workflow id order, against deadlocks; SQLite has one writer at a time.)
--
-- An on_success batch whose last job finished dead, discarded or cancelled
-- gets no callback, and its finished_at stayed NULL: it looked unfinished
-- for ever. It is now set when the last job of a sealed batch finishes
-- whether or not a callback is due (Dead and Cancelled tell the failures),
-- and cleared when a job of a batch still without callback is retried (a
-- retried job that completes brings the callback, as before).
--
-- Deleting a batch's unfinished job left the batch pending for ever; it
-- now counts as cancelled. Deleting a workflow task's unfinished job
-- counts as that task failing, as a cancel does.

DROP TRIGGER twice_jobs_batch;

CREATE TRIGGER twice_jobs_batch AFTER UPDATE OF finished_at ON twice_jobs
WHEN NEW.batch_id IS NOT NULL
    AND (OLD.state IN ('available', 'running')) <> (NEW.state IN ('available', 'running'))
BEGIN
    UPDATE twice_batches SET
        pending   = pending + CASE WHEN NEW.state IN ('available', 'running') THEN 1 ELSE -1 END,
        completed = completed + (NEW.state = 'completed') - (OLD.state = 'completed'),
        dead      = dead + (NEW.state IN ('dead', 'discarded')) - (OLD.state IN ('dead', 'discarded')),
        cancelled = cancelled + (NEW.state = 'cancelled') - (OLD.state = 'cancelled'),
        finished_at = CASE WHEN callback_state <> 0 THEN finished_at
            WHEN sealed = 1 AND pending + CASE WHEN NEW.state IN ('available', 'running') THEN 1 ELSE -1 END = 0
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

-- A batch's unfinished job was deleted: counted as cancelled, so the batch
-- can finish (with its callback, unless on_success).
CREATE TRIGGER twice_jobs_batch_deleted AFTER DELETE ON twice_jobs
WHEN OLD.batch_id IS NOT NULL AND OLD.state IN ('available', 'running')
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

-- A workflow task's unfinished job was deleted: the task failed, as in
-- twice_jobs_workflow_failed.
CREATE TRIGGER twice_jobs_workflow_deleted AFTER DELETE ON twice_jobs
WHEN OLD.workflow_id IS NOT NULL AND OLD.state IN ('available', 'running')
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
