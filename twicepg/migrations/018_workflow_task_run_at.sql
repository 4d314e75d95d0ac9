-- 018: a workflow task keeps its own due time.
--
-- EnqueueOpts.Delay and RunAt were dropped for workflow tasks: roots were
-- enqueued due at once, and the others when their last dependency
-- completed. A task now keeps the time its options asked for (NULL when
-- none) and its job is due at that time or when its last dependency
-- completed, whichever is later (roots: at that time or when the workflow
-- was stored). created_at stays the time of the release.

ALTER TABLE twice_workflow_tasks ADD COLUMN run_at timestamptz;

-- twice_workflow_release is 017's, with the task's own run_at.
CREATE OR REPLACE FUNCTION twice_workflow_release(wf bigint, done text[], done_at timestamptz[])
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
                max_attempts, greatest(run_at, released, clock_timestamp()), greatest(released, clock_timestamp()),
                metadata, concurrency_key, workflow_id, name
            FROM ready WHERE state = 'enqueued' ORDER BY name
            RETURNING queue
        )
        SELECT DISTINCT queue FROM inserted
    LOOP
        PERFORM pg_notify(twice_insert_channel(), q);
    END LOOP;
END
$$;
