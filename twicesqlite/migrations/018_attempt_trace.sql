-- 018: a job keeps the trace context of its last attempt (PostgreSQL's 020).
--
-- trace is the W3C traceparent of the job's last attempt whose outcome was
-- written ('' when no tracer was set), so the next attempt's span, on any
-- node, links to it. A workflow task is released with the traces of the
-- tasks it depends on (comma separated), so its first attempt's span links
-- along the workflow's edges.

ALTER TABLE twice_jobs ADD COLUMN trace TEXT NOT NULL DEFAULT '';

-- 017's trigger, with the dependencies' traces.
DROP TRIGGER twice_jobs_workflow_completed;

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
