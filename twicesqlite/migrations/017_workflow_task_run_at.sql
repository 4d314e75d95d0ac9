-- 017: a workflow task keeps its own due time (PostgreSQL's 018).
--
-- EnqueueOpts.Delay and RunAt were dropped for workflow tasks: roots were
-- enqueued due at once, and the others when their last dependency
-- completed. A task now keeps the time its options asked for (NULL when
-- none, microseconds like every time here) and its job is due at that
-- time or when its last dependency completed, whichever is later (roots:
-- at that time or when the workflow was stored). created_at stays the
-- time of the release.

ALTER TABLE twice_workflow_tasks ADD COLUMN run_at INTEGER;

-- 012's trigger, with the task's own run_at.
DROP TRIGGER twice_jobs_workflow_completed;

CREATE TRIGGER twice_jobs_workflow_completed AFTER UPDATE OF finished_at ON twice_jobs
WHEN NEW.workflow_id IS NOT NULL AND NEW.state = 'completed' AND OLD.state <> 'completed'
BEGIN
    UPDATE twice_workflow_tasks SET pending = pending - 1
    WHERE workflow_id = NEW.workflow_id AND state = 'waiting' AND name IN (
        SELECT task FROM twice_workflow_deps WHERE workflow_id = NEW.workflow_id AND dep = NEW.workflow_task);
    INSERT INTO twice_jobs (kind, queue, priority, args, message_id, idempotency_key, correlation_id,
        max_attempts, run_at, created_at, metadata, concurrency_key, workflow_id, workflow_task)
    SELECT kind, queue, priority, args, message_id, idempotency_key, correlation_id,
        max_attempts,
        max(coalesce(run_at, 0), coalesce(NEW.finished_at, 0), CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)),
        max(coalesce(NEW.finished_at, 0), CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)),
        metadata, concurrency_key, workflow_id, name
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
