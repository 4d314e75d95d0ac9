-- 016: batch and workflow counters, updated in a fixed order; a batch that
-- will get no callback still finishes.
--
-- Deadlocks. 012's row triggers updated a batch's (or workflow's) counter
-- row as each of its jobs was finished, in the order the statement updated
-- the jobs. Two completion statements finishing interleaved jobs of two
-- batches X and Y (ids x1 < y1 < x2 < y2, one statement {x1, y2}, the other
-- {y1, x2}) locked X then Y and Y then X: "deadlock detected", whatever
-- order each statement takes its jobs in. Now the row triggers only note
-- the change (in a transaction-local setting: no row, no lock), and one
-- statement-level trigger applies the statement's changes at its end, in
-- a fixed order: batches by id, then workflows by id. Every path that
-- locks counter rows of more than one batch or workflow goes through it,
-- and every other path (seal, add, cancel a workflow) locks one.
--
-- Batches that finish without a callback. An on_success batch whose last
-- job finished dead, discarded or cancelled gets no callback, and its
-- finished_at stayed NULL: it looked unfinished for ever. It is now set
-- when the last job of a sealed batch finishes whether or not a callback
-- is due (Dead and Cancelled tell the failures), and cleared when a job of
-- a batch still without callback is retried (a retried job that completes
-- brings the callback, as before).
--
-- Deleted jobs. Deleting a batch's unfinished job left the batch pending
-- for ever; it now counts as cancelled. Deleting a workflow task's
-- unfinished job counts as that task failing, as a cancel does.

DROP TRIGGER twice_jobs_batch ON twice_jobs;
DROP TRIGGER twice_jobs_workflow_completed ON twice_jobs;
DROP TRIGGER twice_jobs_workflow_failed ON twice_jobs;
DROP TRIGGER twice_jobs_workflow_retried ON twice_jobs;
DROP FUNCTION twice_jobs_batch();
DROP FUNCTION twice_jobs_workflow_completed();
DROP FUNCTION twice_jobs_workflow_failed();
DROP FUNCTION twice_jobs_workflow_retried();

-- twice_jobs_counter_note appends one change to the statement's list, a
-- transaction-local setting holding JSON objects separated by commas.
-- TG_ARGV[0] is what changed: b (a batch job finished, was retried or
-- deleted), wc (a workflow job completed), wf (one failed or was deleted
-- unfinished), wr (a failed one was retried).
CREATE FUNCTION twice_jobs_counter_note() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    queued text := current_setting('twice.counter_changes', true);
    change jsonb;
BEGIN
    IF TG_OP = 'DELETE' THEN
        change := jsonb_build_object('k', TG_ARGV[0],
            'target', CASE WHEN TG_ARGV[0] = 'b' THEN OLD.batch_id ELSE OLD.workflow_id END,
            'job', OLD.id, 'old', OLD.state, 'new', 'cancelled', 'fin', clock_timestamp(), 'task', OLD.workflow_task);
    ELSE
        change := jsonb_build_object('k', TG_ARGV[0],
            'target', CASE WHEN TG_ARGV[0] = 'b' THEN NEW.batch_id ELSE NEW.workflow_id END,
            'job', NEW.id, 'old', OLD.state, 'new', NEW.state, 'fin', NEW.finished_at, 'task', NEW.workflow_task);
    END IF;
    PERFORM set_config('twice.counter_changes',
        CASE WHEN coalesce(queued, '') = '' THEN '' ELSE queued || ',' END || change::text, true);
    RETURN NULL;
END
$$;

-- twice_batch_count applies one batch job's move between unfinished and
-- finished: the counters follow, finished_at says whether the batch is
-- finished, and the move that leaves a sealed batch with nothing pending
-- (and, for on_success, nothing failed) inserts the callback, once: only
-- the update that moves callback_state from 0 does.
CREATE FUNCTION twice_batch_count(batch bigint, job bigint, old_state text, new_state text, fin timestamptz)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    step int := CASE WHEN new_state IN ('available', 'running') THEN 1 ELSE -1 END;
    at timestamptz := greatest(fin, clock_timestamp());
    b twice_batches%ROWTYPE;
    cb bigint;
BEGIN
    UPDATE twice_batches SET
        pending   = pending + step,
        completed = completed + (new_state = 'completed')::int - (old_state = 'completed')::int,
        dead      = dead + (new_state IN ('dead', 'discarded'))::int - (old_state IN ('dead', 'discarded'))::int,
        cancelled = cancelled + (new_state = 'cancelled')::int - (old_state = 'cancelled')::int,
        finished_at = CASE WHEN callback_state <> 0 THEN finished_at
            WHEN sealed AND pending + step = 0 THEN coalesce(finished_at, at) END
    WHERE id = batch
    RETURNING * INTO b;
    IF b.id IS NOT NULL AND b.callback_state = 0 AND b.sealed AND b.pending = 0
        AND (NOT b.on_success OR (b.dead = 0 AND b.cancelled = 0)) THEN
        INSERT INTO twice_jobs (kind, queue, priority, args, message_id, idempotency_key, correlation_id,
            max_attempts, run_at, created_at, metadata, concurrency_key, parent_id)
        VALUES (b.kind, b.queue, b.priority, b.args, b.message_id, b.idempotency_key, b.correlation_id,
            b.max_attempts, at, at, b.metadata, b.concurrency_key, job)
        RETURNING id INTO cb;
        UPDATE twice_batches SET callback_state = 2, callback_job_id = cb, finished_at = at WHERE id = batch;
        PERFORM pg_notify(twice_insert_channel(), b.queue);
    END IF;
END
$$;

-- twice_workflow_count_completed: a task's job completed; each dependant
-- has one dependency fewer to wait for, and those left with none are
-- enqueued. The workflow row, locked first, serialises the completions of
-- its tasks; the unique (workflow_id, workflow_task) index makes a second
-- insert of a task impossible.
CREATE FUNCTION twice_workflow_count_completed(wf bigint, task_name text, fin timestamptz)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    q text;
BEGIN
    UPDATE twice_workflows SET completed = completed + 1,
        state = CASE WHEN state = 'running' AND completed + 1 >= tasks THEN 'completed' ELSE state END,
        finished_at = CASE WHEN state = 'running' AND completed + 1 >= tasks THEN fin ELSE finished_at END
    WHERE id = wf;
    FOR q IN
        WITH ready AS (
            UPDATE twice_workflow_tasks AS t SET pending = t.pending - 1,
                state = CASE WHEN t.pending = 1 THEN 'enqueued' ELSE t.state END
            FROM twice_workflow_deps AS d
            WHERE d.workflow_id = wf AND d.dep = task_name
              AND t.workflow_id = d.workflow_id AND t.name = d.task AND t.state = 'waiting'
            RETURNING t.*
        ), inserted AS (
            INSERT INTO twice_jobs (kind, queue, priority, args, message_id, idempotency_key, correlation_id,
                max_attempts, run_at, created_at, metadata, concurrency_key, workflow_id, workflow_task)
            SELECT kind, queue, priority, args, message_id, idempotency_key, correlation_id,
                max_attempts, greatest(fin, clock_timestamp()), greatest(fin, clock_timestamp()), metadata,
                concurrency_key, workflow_id, name
            FROM ready WHERE state = 'enqueued' ORDER BY name
            RETURNING queue
        )
        SELECT DISTINCT queue FROM inserted
    LOOP
        PERFORM pg_notify(twice_insert_channel(), q);
    END LOOP;
END
$$;

-- twice_workflow_count_failed: a task's job failed for good (dead,
-- cancelled, or deleted unfinished): counted, so the workflow shows as
-- blocked; under on_dead 'cancel' every task downstream of it that still
-- waits is cancelled, and the workflow has failed.
CREATE FUNCTION twice_workflow_count_failed(wf bigint, task_name text, fin timestamptz)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    policy text;
BEGIN
    UPDATE twice_workflows SET dead = dead + 1,
        state = CASE WHEN state = 'running' AND on_dead = 'cancel' THEN 'failed' ELSE state END,
        finished_at = CASE WHEN state = 'running' AND on_dead = 'cancel' THEN fin ELSE finished_at END
    WHERE id = wf
    RETURNING on_dead INTO policy;
    IF policy = 'cancel' THEN
        UPDATE twice_workflow_tasks SET state = 'cancelled'
        WHERE workflow_id = wf AND state = 'waiting' AND name IN (
            WITH RECURSIVE down(name) AS (
                SELECT d.task FROM twice_workflow_deps AS d WHERE d.workflow_id = wf AND d.dep = task_name
                UNION
                SELECT d.task FROM twice_workflow_deps AS d JOIN down ON d.dep = down.name
                WHERE d.workflow_id = wf)
            SELECT name FROM down);
    END IF;
END
$$;

-- twice_jobs_counters_apply applies the changes the statement's row
-- triggers noted, batches by id and then workflows by id (each one's jobs
-- by id), so concurrent statements lock counter rows in one order.
-- Statements that noted nothing (every plain job's) return at once.
CREATE FUNCTION twice_jobs_counters_apply() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    queued text := current_setting('twice.counter_changes', true);
    c record;
BEGIN
    IF coalesce(queued, '') = '' THEN
        RETURN NULL;
    END IF;
    PERFORM set_config('twice.counter_changes', '', true);
    FOR c IN
        SELECT * FROM jsonb_to_recordset(('[' || queued || ']')::jsonb)
            AS x(k text, target bigint, job bigint, old text, new text, fin timestamptz, task text)
        ORDER BY x.k <> 'b', x.target, x.job
    LOOP
        CASE c.k
        WHEN 'b' THEN
            PERFORM twice_batch_count(c.target, c.job, c.old, c.new, c.fin);
        WHEN 'wc' THEN
            PERFORM twice_workflow_count_completed(c.target, c.task, c.fin);
        WHEN 'wf' THEN
            PERFORM twice_workflow_count_failed(c.target, c.task, c.fin);
        ELSE -- wr
            UPDATE twice_workflows SET dead = greatest(dead - 1, 0) WHERE id = c.target;
        END CASE;
    END LOOP;
    RETURN NULL;
END
$$;

-- The row triggers keep 012's names and conditions.
CREATE TRIGGER twice_jobs_batch AFTER UPDATE OF finished_at ON twice_jobs
FOR EACH ROW
WHEN (NEW.batch_id IS NOT NULL
    AND (OLD.state IN ('available', 'running')) <> (NEW.state IN ('available', 'running')))
EXECUTE FUNCTION twice_jobs_counter_note('b');

CREATE TRIGGER twice_jobs_workflow_completed AFTER UPDATE OF finished_at ON twice_jobs
FOR EACH ROW
WHEN (NEW.workflow_id IS NOT NULL AND NEW.state = 'completed' AND OLD.state <> 'completed')
EXECUTE FUNCTION twice_jobs_counter_note('wc');

CREATE TRIGGER twice_jobs_workflow_failed AFTER UPDATE OF finished_at ON twice_jobs
FOR EACH ROW
WHEN (NEW.workflow_id IS NOT NULL AND NEW.state IN ('dead', 'cancelled')
    AND OLD.state NOT IN ('dead', 'discarded', 'cancelled'))
EXECUTE FUNCTION twice_jobs_counter_note('wf');

CREATE TRIGGER twice_jobs_workflow_retried AFTER UPDATE OF finished_at ON twice_jobs
FOR EACH ROW
WHEN (NEW.workflow_id IS NOT NULL AND OLD.state IN ('dead', 'discarded', 'cancelled')
    AND NEW.state IN ('available', 'running'))
EXECUTE FUNCTION twice_jobs_counter_note('wr');

CREATE TRIGGER twice_jobs_batch_deleted AFTER DELETE ON twice_jobs
FOR EACH ROW
WHEN (OLD.batch_id IS NOT NULL AND OLD.state IN ('available', 'running'))
EXECUTE FUNCTION twice_jobs_counter_note('b');

CREATE TRIGGER twice_jobs_workflow_deleted AFTER DELETE ON twice_jobs
FOR EACH ROW
WHEN (OLD.workflow_id IS NOT NULL AND OLD.state IN ('available', 'running'))
EXECUTE FUNCTION twice_jobs_counter_note('wf');

-- Not UPDATE OF finished_at: where one statement updates twice_jobs twice
-- (JobCancel's CTEs: one cancels, one only records a request), PostgreSQL
-- fires a statement trigger once, judged by the last update's columns, and
-- the changes the first one noted would be lost. A statement that noted
-- nothing (a fetch, a heartbeat) pays one call that reads a setting.
CREATE TRIGGER twice_jobs_counters AFTER UPDATE ON twice_jobs
FOR EACH STATEMENT EXECUTE FUNCTION twice_jobs_counters_apply();

CREATE TRIGGER twice_jobs_counters_deleted AFTER DELETE ON twice_jobs
FOR EACH STATEMENT EXECUTE FUNCTION twice_jobs_counters_apply();
