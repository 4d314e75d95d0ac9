-- 002: composition (workflows and batches) and the signals of durable
-- waits, kept right by triggers on twice_jobs.
--
-- Every path that moves a job between states (finish, rescue, cancel,
-- retry, discard, delete) keeps its batch's and its workflow's counters in
-- the same statement, without knowing of them. A MySQL trigger cannot
-- insert into the table whose statement fired it (error 1442), so these
-- triggers only count and MARK what is due: a batch's callback
-- (callback_state 1, with the job that fired it in callback_parent_id) and
-- the workflow tasks whose last dependency completed (state 'ready', with
-- released_at). The driver inserts the jobs marked before its transaction
-- commits (settleComposition in compose.go), so an edge fires exactly once,
-- in the transaction of the state change that caused it.
--
-- One trigger per event, each body behind one IF: a job in no batch and no
-- workflow, or a write that leaves the state as it was (the lease
-- heartbeat), runs nothing more.
--
-- Single-table UPDATEs below assign a column only after every assignment
-- that reads it: MySQL evaluates assignments left to right, each seeing
-- the ones before, and MariaDB does the same unless sql_mode has
-- SIMULTANEOUS_ASSIGNMENT; in this order both read the values as they were.
--
-- Each trigger is dropped before it is created, so the migration runs
-- again harmlessly after a crash (MySQL commits DDL statement by statement).

DROP TRIGGER IF EXISTS twice_jobs_composition_updated;

CREATE TRIGGER twice_jobs_composition_updated AFTER UPDATE ON twice_jobs FOR EACH ROW
BEGIN
    DECLARE was_unfinished, is_unfinished BOOLEAN;
    DECLARE released DATETIME(6);
    IF NEW.state <> OLD.state AND (NEW.batch_id IS NOT NULL OR NEW.workflow_id IS NOT NULL) THEN
        SET was_unfinished = OLD.state IN ('available', 'running', 'waiting');
        SET is_unfinished = NEW.state IN ('available', 'running', 'waiting');
        -- Jobs an edge makes due are created (and due) when it fires, or at
        -- the finish time of the job that fired it if that is later.
        SET released = GREATEST(COALESCE(NEW.finished_at, UTC_TIMESTAMP(6)), UTC_TIMESTAMP(6));

        -- A batch job moved between unfinished and finished: the counters
        -- follow. The move that leaves a sealed batch with nothing pending
        -- finishes it, and makes its callback due, once (callback_state
        -- goes 0 to 1 only from 0) unless on_success and a job failed.
        -- A retry of a batch still without callback unfinishes it again.
        IF NEW.batch_id IS NOT NULL AND was_unfinished <> is_unfinished THEN
            UPDATE twice_batches SET
                finished_at = CASE WHEN callback_state <> 0 THEN finished_at
                    WHEN sealed = 1 AND pending + IF(is_unfinished, 1, -1) = 0
                    THEN COALESCE(finished_at, released) END,
                pending   = pending + IF(is_unfinished, 1, -1),
                completed = completed + (NEW.state = 'completed') - (OLD.state = 'completed'),
                dead      = dead + (NEW.state IN ('dead', 'discarded')) - (OLD.state IN ('dead', 'discarded')),
                cancelled = cancelled + (NEW.state = 'cancelled') - (OLD.state = 'cancelled')
            WHERE id = NEW.batch_id;
            UPDATE twice_batches SET callback_state = 1, callback_parent_id = NEW.id, finished_at = released
            WHERE id = NEW.batch_id AND callback_state = 0 AND sealed = 1 AND pending = 0
                AND (on_success = 0 OR (dead = 0 AND cancelled = 0));
        END IF;

        IF NEW.workflow_id IS NOT NULL THEN
            -- A task's job completed: each dependant has one dependency
            -- fewer to wait for, and those left with none are ready.
            IF NEW.state = 'completed' THEN
                UPDATE twice_workflow_tasks SET
                    released_at = IF(pending = 1, released, released_at),
                    state = IF(pending = 1, 'ready', state),
                    pending = pending - 1
                WHERE workflow_id = NEW.workflow_id AND state = 'waiting' AND name IN (
                    SELECT task FROM twice_workflow_deps WHERE workflow_id = NEW.workflow_id AND dep = NEW.workflow_task);
                UPDATE twice_workflows SET
                    finished_at = IF(state = 'running' AND completed + 1 >= tasks, NEW.finished_at, finished_at),
                    state = IF(state = 'running' AND completed + 1 >= tasks, 'completed', state),
                    completed = completed + 1
                WHERE id = NEW.workflow_id;
            END IF;

            -- A task's job failed for good (dead, or cancelled): counted, so
            -- the workflow shows as blocked; under on_dead 'cancel' every
            -- task downstream of it that still waits is cancelled, and the
            -- workflow has failed.
            IF NEW.state IN ('dead', 'cancelled') AND OLD.state NOT IN ('dead', 'discarded', 'cancelled') THEN
                UPDATE twice_workflows SET
                    finished_at = IF(state = 'running' AND on_dead = 'cancel', NEW.finished_at, finished_at),
                    state = IF(state = 'running' AND on_dead = 'cancel', 'failed', state),
                    dead = dead + 1
                WHERE id = NEW.workflow_id;
                IF (SELECT on_dead FROM twice_workflows WHERE id = NEW.workflow_id) = 'cancel' THEN
                    UPDATE twice_workflow_tasks SET state = 'cancelled'
                    WHERE workflow_id = NEW.workflow_id AND state = 'waiting' AND name IN (
                        WITH RECURSIVE down (name) AS (
                            SELECT task FROM twice_workflow_deps WHERE workflow_id = NEW.workflow_id AND dep = NEW.workflow_task
                            UNION
                            SELECT d.task FROM twice_workflow_deps AS d JOIN down ON d.dep = down.name
                            WHERE d.workflow_id = NEW.workflow_id)
                        SELECT name FROM down);
                END IF;
            END IF;

            -- A failed task's job was retried: the workflow is no longer
            -- blocked on it.
            IF OLD.state IN ('dead', 'discarded', 'cancelled') AND is_unfinished THEN
                UPDATE twice_workflows SET dead = GREATEST(dead - 1, 0) WHERE id = NEW.workflow_id;
            END IF;
        END IF;
    END IF;
END;

DROP TRIGGER IF EXISTS twice_jobs_composition_deleted;

-- A job was deleted. Its signals leave with it (every stored resolution
-- grew its signal_seq, so a job whose count is 0 has none). An unfinished
-- batch job counts as cancelled, so the batch can finish (with its
-- callback, unless on_success); an unfinished workflow task's job counts
-- as that task failing, as a cancel does.
CREATE TRIGGER twice_jobs_composition_deleted AFTER DELETE ON twice_jobs FOR EACH ROW
BEGIN
    IF OLD.signal_seq > 0 THEN
        DELETE FROM twice_signals WHERE job_id = OLD.id;
    END IF;
    IF OLD.state IN ('available', 'running', 'waiting') THEN
        IF OLD.batch_id IS NOT NULL THEN
            UPDATE twice_batches SET
                finished_at = CASE WHEN callback_state <> 0 THEN finished_at
                    WHEN sealed = 1 AND pending = 1 THEN COALESCE(finished_at, UTC_TIMESTAMP(6)) END,
                pending = pending - 1,
                cancelled = cancelled + 1
            WHERE id = OLD.batch_id;
            UPDATE twice_batches SET callback_state = 1, callback_parent_id = OLD.id
            WHERE id = OLD.batch_id AND callback_state = 0 AND sealed = 1 AND pending = 0 AND on_success = 0;
        END IF;
        IF OLD.workflow_id IS NOT NULL THEN
            UPDATE twice_workflows SET
                finished_at = IF(state = 'running' AND on_dead = 'cancel', UTC_TIMESTAMP(6), finished_at),
                state = IF(state = 'running' AND on_dead = 'cancel', 'failed', state),
                dead = dead + 1
            WHERE id = OLD.workflow_id;
            IF (SELECT on_dead FROM twice_workflows WHERE id = OLD.workflow_id) = 'cancel' THEN
                UPDATE twice_workflow_tasks SET state = 'cancelled'
                WHERE workflow_id = OLD.workflow_id AND state = 'waiting' AND name IN (
                    WITH RECURSIVE down (name) AS (
                        SELECT task FROM twice_workflow_deps WHERE workflow_id = OLD.workflow_id AND dep = OLD.workflow_task
                        UNION
                        SELECT d.task FROM twice_workflow_deps AS d JOIN down ON d.dep = down.name
                        WHERE d.workflow_id = OLD.workflow_id)
                    SELECT name FROM down);
            END IF;
        END IF;
    END IF;
END;
