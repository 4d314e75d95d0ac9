-- 017: batch and workflow counters applied once per statement, from its
-- transition tables.
--
-- 016's row triggers noted each job's change by appending it to one
-- transaction-local text setting, which every note copied whole: a
-- statement that finished, cancelled or deleted n jobs of batches or
-- workflows paid O(n²) (cancelling a 20,000-job batch took 80 s, against
-- 0.9 s for 20,000 plain jobs), and then updated the batch's (or the
-- workflow's) row once per job, n versions of one row, all the while
-- holding every job it had matched. Now two statement-level triggers read
-- the statement's rows from its transition tables (REFERENCING OLD TABLE /
-- NEW TABLE, which also cover every data-modifying CTE of the statement
-- that updated twice_jobs, in one firing) and apply the changes with one
-- aggregate per batch and per workflow: linear in the jobs, one update of
-- each counter row per statement.
--
-- The lock order 016 was written for is kept: the changes are applied
-- batches by id, then workflows by id, at the end of the statement, after
-- the statement has locked its jobs (see 016 for the deadlocks this
-- prevents).
--
-- Which moves count is as in 016's row triggers, decided from the states
-- alone: every write that moves a job into or out of a finished state also
-- sets finished_at, so 016's "UPDATE OF finished_at" picked the same rows
-- (a trigger with transition tables cannot name columns). A statement that
-- touched no batch or workflow job (a fetch, a heartbeat, plain jobs'
-- outcomes) returns after one scan of its own new rows.

DROP TRIGGER twice_jobs_batch ON twice_jobs;
DROP TRIGGER twice_jobs_workflow_completed ON twice_jobs;
DROP TRIGGER twice_jobs_workflow_failed ON twice_jobs;
DROP TRIGGER twice_jobs_workflow_retried ON twice_jobs;
DROP TRIGGER twice_jobs_batch_deleted ON twice_jobs;
DROP TRIGGER twice_jobs_workflow_deleted ON twice_jobs;
DROP TRIGGER twice_jobs_counters ON twice_jobs;
DROP TRIGGER twice_jobs_counters_deleted ON twice_jobs;
DROP FUNCTION twice_jobs_counter_note();
DROP FUNCTION twice_jobs_counters_apply();
DROP FUNCTION twice_batch_count(bigint, bigint, text, text, timestamptz);
DROP FUNCTION twice_workflow_count_completed(bigint, text, timestamptz);
DROP FUNCTION twice_workflow_count_failed(bigint, text, timestamptz);

-- twice_counter_change is one job's move that a counter follows. k is what
-- moved: b (a batch job finished, was retried or deleted unfinished), wc (a
-- workflow job completed), wf (one failed for good or was deleted
-- unfinished), wr (a failed one was retried). target is the batch or the
-- workflow; new_state is 'cancelled' for a deleted job.
CREATE TYPE twice_counter_change AS (
    k         text,
    target    bigint,
    job       bigint,
    old_state text,
    new_state text,
    fin       timestamptz,
    task      text
);

-- twice_batch_apply applies one statement's moves of batch's jobs, summed:
-- the counters follow, finished_at says whether the batch is finished, and
-- the update that leaves a sealed batch with nothing pending (and, for
-- on_success, nothing failed) inserts the callback, once: only the update
-- that moves callback_state from 0 does. The callback's parent is the last
-- job (by id) of the moves, the one whose move finished the batch.
CREATE FUNCTION twice_batch_apply(batch bigint, moved integer, completed_moved integer, dead_moved integer,
    cancelled_moved integer, fin timestamptz, last_job bigint)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    at timestamptz := greatest(fin, clock_timestamp());
    b twice_batches%ROWTYPE;
    cb bigint;
BEGIN
    UPDATE twice_batches SET
        pending   = pending + moved,
        completed = completed + completed_moved,
        dead      = dead + dead_moved,
        cancelled = cancelled + cancelled_moved,
        finished_at = CASE WHEN callback_state <> 0 THEN finished_at
            WHEN sealed AND pending + moved = 0 THEN coalesce(finished_at, at) END
    WHERE id = batch
    RETURNING * INTO b;
    IF b.id IS NOT NULL AND b.callback_state = 0 AND b.sealed AND b.pending = 0
        AND (NOT b.on_success OR (b.dead = 0 AND b.cancelled = 0)) THEN
        INSERT INTO twice_jobs (kind, queue, priority, args, message_id, idempotency_key, correlation_id,
            max_attempts, run_at, created_at, metadata, concurrency_key, parent_id)
        VALUES (b.kind, b.queue, b.priority, b.args, b.message_id, b.idempotency_key, b.correlation_id,
            b.max_attempts, at, at, b.metadata, b.concurrency_key, last_job)
        RETURNING id INTO cb;
        UPDATE twice_batches SET callback_state = 2, callback_job_id = cb, finished_at = at WHERE id = batch;
        PERFORM pg_notify(twice_insert_channel(), b.queue);
    END IF;
END
$$;

-- twice_workflow_release: the tasks named in done completed (done_at[i]
-- is when done[i] did); each of their dependants has that many
-- dependencies fewer to wait for, and those left with none are enqueued,
-- created and due when their last dependency completed or now, whichever
-- is later. The caller holds the workflow's row, which serialises the
-- completions of its tasks; the unique (workflow_id, workflow_task) index
-- makes a second insert of a task impossible.
CREATE FUNCTION twice_workflow_release(wf bigint, done text[], done_at timestamptz[])
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    q text;
BEGIN
    FOR q IN
        WITH counts AS (
            SELECT d.task, count(*)::integer AS n, max(c.fin) AS fin
            FROM unnest(done, done_at) AS c(name, fin)
            JOIN twice_workflow_deps AS d ON d.workflow_id = wf AND d.dep = c.name
            GROUP BY d.task
        ), ready AS (
            UPDATE twice_workflow_tasks AS t SET pending = t.pending - c.n,
                state = CASE WHEN t.pending = c.n THEN 'enqueued' ELSE t.state END
            FROM counts AS c
            WHERE t.workflow_id = wf AND t.name = c.task AND t.state = 'waiting'
            RETURNING t.*, c.fin AS released
        ), inserted AS (
            INSERT INTO twice_jobs (kind, queue, priority, args, message_id, idempotency_key, correlation_id,
                max_attempts, run_at, created_at, metadata, concurrency_key, workflow_id, workflow_task)
            SELECT kind, queue, priority, args, message_id, idempotency_key, correlation_id,
                max_attempts, greatest(released, clock_timestamp()), greatest(released, clock_timestamp()), metadata,
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

-- twice_workflow_apply applies one statement's moves of wf's jobs: the
-- tasks in done completed (their dependants are released), those in failed
-- failed for good (counted, so the workflow shows as blocked; under
-- on_dead 'cancel' every task downstream of them that still waits is
-- cancelled, and the workflow has failed), and retried failed ones were
-- retried. The workflow's row is updated once, and first: it is the lock
-- that orders this workflow's counters.
CREATE FUNCTION twice_workflow_apply(wf bigint, done text[], done_at timestamptz[], failed text[],
    failed_at timestamptz, retried integer)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    policy text;
    n_done integer := cardinality(done);
    n_failed integer := cardinality(failed);
BEGIN
    UPDATE twice_workflows SET
        completed = completed + n_done,
        dead = greatest(dead + n_failed - retried, 0),
        state = CASE WHEN state <> 'running' THEN state
            WHEN n_done > 0 AND completed + n_done >= tasks THEN 'completed'
            WHEN n_failed > 0 AND on_dead = 'cancel' THEN 'failed'
            ELSE state END,
        finished_at = CASE WHEN state <> 'running' THEN finished_at
            WHEN n_done > 0 AND completed + n_done >= tasks THEN (SELECT max(x) FROM unnest(done_at) AS x)
            WHEN n_failed > 0 AND on_dead = 'cancel' THEN failed_at
            ELSE finished_at END
    WHERE id = wf
    RETURNING on_dead INTO policy;
    IF n_done > 0 THEN
        PERFORM twice_workflow_release(wf, done, done_at);
    END IF;
    IF n_failed > 0 AND policy = 'cancel' THEN
        UPDATE twice_workflow_tasks SET state = 'cancelled'
        WHERE workflow_id = wf AND state = 'waiting' AND name IN (
            WITH RECURSIVE down(name) AS (
                SELECT d.task FROM twice_workflow_deps AS d JOIN unnest(failed) AS f(name) ON d.dep = f.name
                WHERE d.workflow_id = wf
                UNION
                SELECT d.task FROM twice_workflow_deps AS d JOIN down ON d.dep = down.name
                WHERE d.workflow_id = wf)
            SELECT name FROM down);
    END IF;
END
$$;

-- twice_counters_apply applies a statement's moves: per batch and per
-- workflow, summed, batches by id and then workflows by id, so concurrent
-- statements lock counter rows in one order.
CREATE FUNCTION twice_counters_apply(changes twice_counter_change[])
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    c record;
BEGIN
    FOR c IN
        SELECT 0 AS pass, x.target,
            sum(CASE WHEN x.new_state IN ('available', 'running') THEN 1 ELSE -1 END)::integer AS moved,
            sum((x.new_state = 'completed')::integer - (x.old_state = 'completed')::integer)::integer AS completed_moved,
            sum((x.new_state IN ('dead', 'discarded'))::integer - (x.old_state IN ('dead', 'discarded'))::integer)::integer AS dead_moved,
            sum((x.new_state = 'cancelled')::integer - (x.old_state = 'cancelled')::integer)::integer AS cancelled_moved,
            max(x.fin) AS fin, max(x.job) AS last_job,
            NULL::text[] AS done, NULL::timestamptz[] AS done_at, NULL::text[] AS failed,
            NULL::timestamptz AS failed_at, 0 AS retried
        FROM unnest(changes) AS x WHERE x.k = 'b' GROUP BY x.target
        UNION ALL
        SELECT 1, x.target, 0, 0, 0, 0, NULL, 0,
            coalesce(array_agg(x.task) FILTER (WHERE x.k = 'wc'), '{}'),
            coalesce(array_agg(x.fin) FILTER (WHERE x.k = 'wc'), '{}'),
            coalesce(array_agg(x.task) FILTER (WHERE x.k = 'wf'), '{}'),
            max(x.fin) FILTER (WHERE x.k = 'wf'),
            (count(*) FILTER (WHERE x.k = 'wr'))::integer
        FROM unnest(changes) AS x WHERE x.k <> 'b' GROUP BY x.target
        ORDER BY 1, 2
    LOOP
        IF c.pass = 0 THEN
            PERFORM twice_batch_apply(c.target, c.moved, c.completed_moved, c.dead_moved, c.cancelled_moved,
                c.fin, c.last_job);
        ELSE
            PERFORM twice_workflow_apply(c.target, c.done, c.done_at, c.failed, c.failed_at, c.retried);
        END IF;
    END LOOP;
END
$$;

-- twice_jobs_counters_updated: an UPDATE statement's moves, with 016's
-- row triggers' conditions.
CREATE FUNCTION twice_jobs_counters_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM twice_new_jobs WHERE batch_id IS NOT NULL OR workflow_id IS NOT NULL) THEN
        RETURN NULL;
    END IF;
    PERFORM twice_counters_apply(ARRAY(
        WITH moved AS (
            SELECT n.id, n.batch_id, n.workflow_id, n.workflow_task, o.state AS old_state, n.state AS new_state, n.finished_at
            FROM twice_new_jobs AS n JOIN twice_old_jobs AS o ON o.id = n.id
            WHERE (n.batch_id IS NOT NULL OR n.workflow_id IS NOT NULL) AND n.state <> o.state
        )
        SELECT ROW('b', batch_id, id, old_state, new_state, finished_at, workflow_task)::twice_counter_change
        FROM moved WHERE batch_id IS NOT NULL
            AND (old_state IN ('available', 'running')) <> (new_state IN ('available', 'running'))
        UNION ALL
        SELECT ROW(CASE WHEN new_state = 'completed' THEN 'wc'
                WHEN new_state IN ('dead', 'cancelled') THEN 'wf' ELSE 'wr' END,
            workflow_id, id, old_state, new_state, finished_at, workflow_task)::twice_counter_change
        FROM moved WHERE workflow_id IS NOT NULL AND (
            (new_state = 'completed' AND old_state <> 'completed')
            OR (new_state IN ('dead', 'cancelled') AND old_state NOT IN ('dead', 'discarded', 'cancelled'))
            OR (old_state IN ('dead', 'discarded', 'cancelled') AND new_state IN ('available', 'running')))));
    RETURN NULL;
END
$$;

-- twice_jobs_counters_deleted: a DELETE statement's unfinished batch jobs
-- count as cancelled, and its unfinished workflow jobs as their tasks
-- failing.
CREATE FUNCTION twice_jobs_counters_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM twice_old_jobs
        WHERE (batch_id IS NOT NULL OR workflow_id IS NOT NULL) AND state IN ('available', 'running')) THEN
        RETURN NULL;
    END IF;
    PERFORM twice_counters_apply(ARRAY(
        SELECT ROW(CASE WHEN t.k = 'b' THEN 'b' ELSE 'wf' END, CASE WHEN t.k = 'b' THEN o.batch_id ELSE o.workflow_id END,
            o.id, o.state, 'cancelled', clock_timestamp(), o.workflow_task)::twice_counter_change
        FROM twice_old_jobs AS o
        CROSS JOIN (VALUES ('b'), ('w')) AS t(k)
        WHERE o.state IN ('available', 'running')
          AND CASE WHEN t.k = 'b' THEN o.batch_id ELSE o.workflow_id END IS NOT NULL));
    RETURN NULL;
END
$$;

-- One firing per statement, whatever columns it set and however many of
-- its CTEs updated twice_jobs (JobCancel's cancels some jobs and only
-- records a request on others): the transition tables hold the rows of all.
CREATE TRIGGER twice_jobs_counters AFTER UPDATE ON twice_jobs
REFERENCING OLD TABLE AS twice_old_jobs NEW TABLE AS twice_new_jobs
FOR EACH STATEMENT EXECUTE FUNCTION twice_jobs_counters_updated();

CREATE TRIGGER twice_jobs_counters_deleted AFTER DELETE ON twice_jobs
REFERENCING OLD TABLE AS twice_old_jobs
FOR EACH STATEMENT EXECUTE FUNCTION twice_jobs_counters_deleted();
