-- 025: durable waits — the waiting state, a partition for it, and the
-- signals that resolve waits.
--
-- A handler parks its job (JobFinish with a waiting outcome): the job
-- leaves the live partition for twice_jobs_waiting, where the fetch, the
-- lease extension, the rescue and the rotation never read, and waits there
-- for a signal of the name in wait_name, or for its timer (run_at; the
-- year 9999 when it has none, twicestore.WaitNever). A wait's resolution,
-- the signal's payload or the timer's timeout, is a row of twice_signals,
-- one per job and name, kept for as long as the job: every later run of
-- the handler reads the same one. signal_seq counts the resolutions a job
-- received; a park carries the count its delivery was fetched with, and
-- one that grew since makes the job available at once instead, so a
-- signal sent while the handler decided to park is never lost.
--
-- Both new columns have constant defaults: adding them rewrites nothing.

ALTER TABLE twice_jobs ADD COLUMN wait_name text NOT NULL DEFAULT '';
ALTER TABLE twice_jobs ADD COLUMN signal_seq bigint NOT NULL DEFAULT 0;

-- The states a job may be in are the partitions' bounds: a row of a state
-- no partition takes is refused with SQLSTATE 23514, as the check did.
-- Extending the check instead would read every row of the table, the
-- finished history included, while holding it locked against every
-- statement; dropping it reads nothing.
ALTER TABLE twice_jobs DROP CONSTRAINT IF EXISTS twice_jobs_state_check;

-- The waiting jobs' partition. It takes every index of twice_jobs (those
-- are partitioned indexes), which list and count waiting jobs by state and
-- by kind; the timer scan (JobWakeDue) reads twice_jobs_waiting_timer, in
-- the order the timers fire.
CREATE TABLE twice_jobs_waiting PARTITION OF twice_jobs FOR VALUES IN ('waiting');
CREATE INDEX twice_jobs_waiting_timer ON twice_jobs_waiting (run_at, id);

-- twice_signals holds each wait's resolution: a signal's payload (JSON
-- text), or a timeout (payload NULL, timed_out true, at the time the timer
-- was set for). Nothing refers to twice_jobs by a foreign key (its ids are
-- not unique-indexed since 023): the statements that delete jobs delete
-- their signals with them.
CREATE TABLE twice_signals (
    job_id    bigint      NOT NULL,
    name      text        NOT NULL,
    payload   text,
    timed_out boolean     NOT NULL DEFAULT false,
    at        timestamptz NOT NULL,
    sender    text        NOT NULL DEFAULT '',
    PRIMARY KEY (job_id, name)
);

-- A waiting job holds its unique key as a running one does: a park must
-- not free the key for another job, which the job would then meet again
-- when it wakes. Every place that maps a state to its bit of
-- unique_states (twicetype.UniqueStates) takes 'waiting' as 'running's
-- bit, 2, in the same words (driverkit.UniqueHeldSQL renders them for the
-- queries, and twicepg's tests compare the two): the index on (kind,
-- unique_key), the claim trigger's condition, the claims' follow-up of
-- updates, and twice_enqueue's look-up of a key's holder. Rebuilding the
-- index reads the table once; only rows with a key go in it.
DROP INDEX twice_jobs_unique_key;
CREATE INDEX twice_jobs_unique_key ON twice_jobs (kind, unique_key)
    WHERE unique_key <> '' AND (unique_states & CASE state WHEN 'available' THEN 1 WHEN 'running' THEN 2
        WHEN 'waiting' THEN 2 WHEN 'completed' THEN 4 WHEN 'dead' THEN 8 WHEN 'discarded' THEN 16
        WHEN 'cancelled' THEN 32 ELSE 0 END) <> 0;

DROP TRIGGER twice_jobs_claim_key ON twice_jobs;
CREATE TRIGGER twice_jobs_claim_key BEFORE INSERT ON twice_jobs
    FOR EACH ROW
    WHEN (NEW.unique_key <> '' AND (NEW.unique_states & CASE NEW.state WHEN 'available' THEN 1 WHEN 'running' THEN 2
        WHEN 'waiting' THEN 2 WHEN 'completed' THEN 4 WHEN 'dead' THEN 8 WHEN 'discarded' THEN 16
        WHEN 'cancelled' THEN 32 ELSE 0 END) <> 0)
    EXECUTE FUNCTION twice_jobs_claim_key();

-- 023's function, with the waiting state's bit. A park moves the job to
-- twice_jobs_waiting, and the move's insert fires twice_jobs_claim_key,
-- which finds the job's own claim and lets the row in.
CREATE OR REPLACE FUNCTION twice_jobs_claims_moved() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (SELECT count(*) FROM old_jobs) <> (SELECT count(*) FROM new_jobs) THEN
        RAISE EXCEPTION 'a job cannot hold its unique key again: another job of its kind holds it'
            USING ERRCODE = 'unique_violation';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM new_jobs WHERE unique_key <> '') THEN
        RETURN NULL;
    END IF;
    DELETE FROM twice_unique_claims AS c
    USING new_jobs AS n
    WHERE n.unique_key <> '' AND c.kind = n.kind AND c.unique_key = n.unique_key AND c.job_id = n.id
        AND (n.unique_states & CASE n.state WHEN 'available' THEN 1 WHEN 'running' THEN 2
            WHEN 'waiting' THEN 2 WHEN 'completed' THEN 4 WHEN 'dead' THEN 8 WHEN 'discarded' THEN 16
            WHEN 'cancelled' THEN 32 ELSE 0 END) = 0;
    RETURN NULL;
END
$$;

-- twice_enqueue (019) looks up a key's holder with the same mapping. Its
-- body is long and otherwise unchanged, so it is patched where it stands:
-- its definition, read back, gets the waiting state's bit after the
-- running one's, and replaces itself. The definition read back carries
-- its pinned search_path with it. A body that does not hold the mapping
-- exactly once is not patched blindly: the migration fails.
DO $$
DECLARE
    def text := pg_get_functiondef('twice_enqueue(text, jsonb, jsonb)'::regprocedure);
    old_map CONSTANT text := 'WHEN ''running'' THEN 2';
    new_map CONSTANT text := 'WHEN ''running'' THEN 2 WHEN ''waiting'' THEN 2';
BEGIN
    IF (length(def) - length(replace(def, old_map, ''))) / length(old_map) <> 1 THEN
        RAISE EXCEPTION 'twice_enqueue does not hold its unique states'' mapping exactly once: not patched';
    END IF;
    EXECUTE replace(def, old_map, new_map);
END
$$;

-- The batch and workflow counters (017) take a waiting job as unfinished,
-- as they take available and running ones: a park or a wake is no move
-- they count, and deleting a waiting job counts as cancelling it.
-- Unchanged otherwise.
CREATE OR REPLACE FUNCTION twice_counters_apply(changes twice_counter_change[])
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    c record;
BEGIN
    FOR c IN
        SELECT 0 AS pass, x.target,
            sum(CASE WHEN x.new_state IN ('available', 'running', 'waiting') THEN 1 ELSE -1 END)::integer AS moved,
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

CREATE OR REPLACE FUNCTION twice_jobs_counters_updated() RETURNS trigger LANGUAGE plpgsql AS $$
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
            AND (old_state IN ('available', 'running', 'waiting')) <> (new_state IN ('available', 'running', 'waiting'))
        UNION ALL
        SELECT ROW(CASE WHEN new_state = 'completed' THEN 'wc'
                WHEN new_state IN ('dead', 'cancelled') THEN 'wf' ELSE 'wr' END,
            workflow_id, id, old_state, new_state, finished_at, workflow_task)::twice_counter_change
        FROM moved WHERE workflow_id IS NOT NULL AND (
            (new_state = 'completed' AND old_state <> 'completed')
            OR (new_state IN ('dead', 'cancelled') AND old_state NOT IN ('dead', 'discarded', 'cancelled'))
            OR (old_state IN ('dead', 'discarded', 'cancelled') AND new_state IN ('available', 'running', 'waiting')))));
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION twice_jobs_counters_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM twice_old_jobs
        WHERE (batch_id IS NOT NULL OR workflow_id IS NOT NULL) AND state IN ('available', 'running', 'waiting')) THEN
        RETURN NULL;
    END IF;
    PERFORM twice_counters_apply(ARRAY(
        SELECT ROW(CASE WHEN t.k = 'b' THEN 'b' ELSE 'wf' END, CASE WHEN t.k = 'b' THEN o.batch_id ELSE o.workflow_id END,
            o.id, o.state, 'cancelled', clock_timestamp(), o.workflow_task)::twice_counter_change
        FROM twice_old_jobs AS o
        CROSS JOIN (VALUES ('b'), ('w')) AS t(k)
        WHERE o.state IN ('available', 'running', 'waiting')
          AND CASE WHEN t.k = 'b' THEN o.batch_id ELSE o.workflow_id END IS NOT NULL));
    RETURN NULL;
END
$$;

-- CREATE OR REPLACE dropped 023's pin of twice_jobs_claims_moved, as it
-- did then.
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION twice_jobs_claims_moved() SET search_path = %I, pg_temp', current_schema());
END
$$;
