-- 020: a job keeps the trace context of its last attempt.
--
-- trace is the W3C traceparent of the job's last attempt whose outcome was
-- written ('' when no tracer was set), so the next attempt's span, on any
-- node, links to it. A workflow task is released with the traces of the
-- tasks it depends on (comma separated), so its first attempt's span links
-- along the workflow's edges. Adding a column with a constant default
-- rewrites nothing.

ALTER TABLE twice_jobs ADD COLUMN trace text NOT NULL DEFAULT '';

-- twice_workflow_release is 018's, with the dependencies' traces.
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
                max_attempts, run_at, created_at, metadata, concurrency_key, workflow_id, workflow_task, trace)
            SELECT r.kind, r.queue, r.priority, r.args, r.message_id, r.idempotency_key, r.correlation_id,
                r.max_attempts, greatest(r.run_at, r.released, clock_timestamp()), greatest(r.released, clock_timestamp()),
                r.metadata, r.concurrency_key, r.workflow_id, r.name,
                coalesce((SELECT string_agg(j.trace, ',' ORDER BY j.workflow_task)
                    FROM twice_workflow_deps AS d
                    JOIN twice_jobs AS j ON j.workflow_id = wf AND j.workflow_task = d.dep
                    WHERE d.workflow_id = wf AND d.task = r.name AND j.trace <> ''), '')
            FROM ready AS r WHERE r.state = 'enqueued' ORDER BY r.name
            RETURNING queue
        )
        SELECT DISTINCT queue FROM inserted
    LOOP
        PERFORM pg_notify(twice_insert_channel(), q);
    END LOOP;
END
$$;
