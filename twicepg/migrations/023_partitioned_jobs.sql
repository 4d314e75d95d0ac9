-- 023: twice_jobs in partitions — the jobs that live apart from the
-- finished ones, and the live ones in two generations.
--
-- Every change of a job's state leaves a dead row version, which vacuum
-- can only remove once no snapshot can see it. Beside a long report or a
-- session idle in a transaction, the dead versions pile up for as long as
-- the snapshot is held. Two things follow here:
--
--   - A job that finishes leaves the live partition in the statement that
--     finishes it: twice_jobs is partitioned by state, so the update moves
--     the row to twice_jobs_done. The fetch, the lease and the rescue read
--     a table that holds only waiting and running jobs, whatever the
--     history kept, and retention deletes only from twice_jobs_done.
--   - The live partition is split by gen into twice_jobs_live_0 and
--     twice_jobs_live_1, so that a generation whose waiting jobs were moved
--     to the other can be emptied with TRUNCATE, which removes its dead row
--     versions whatever snapshot is held. Every job starts in generation 0
--     until the rotation comes (a later migration); gen is nothing else.
--
-- A partitioned table's unique index must contain every partition key, so
-- the index on id is not unique (ids come from twice_jobs_id_seq, and only
-- the store writes them), and one job per workflow task, which the task's
-- own row guards (its state moves from waiting to enqueued once), is no
-- longer repeated by a unique index. Unique keys left the table in 022.
--
-- An update that moves a row to another partition is a delete and an
-- insert underneath: row-level UPDATE triggers do not fire for it, so the
-- finished notification is now a statement-level trigger, as the counters'
-- are (017), and the transition tables list moved rows as updated. A
-- statement that waits for a row another transaction moves fails with
-- SQLSTATE 40001; the driver repeats such a statement when it is not part
-- of a transaction.
--
-- The upgrade keeps the table's rows where they are: the unpartitioned
-- table becomes twice_jobs_done once its live jobs are copied out, and its
-- indexes carry over, except the one on id, which is built again without
-- uniqueness.

-- The triggers go first: the old table's rows move without them, and a
-- partition may not carry a trigger with transition tables.
DROP TRIGGER twice_jobs_claim_key ON twice_jobs;
DROP TRIGGER twice_jobs_claims_moved ON twice_jobs;
DROP TRIGGER twice_jobs_claims_deleted ON twice_jobs;
DROP TRIGGER twice_jobs_counters ON twice_jobs;
DROP TRIGGER twice_jobs_counters_deleted ON twice_jobs;
DROP TRIGGER twice_jobs_finished ON twice_jobs;

-- ids keep their sequence, under its name, owned by the new table's id.
CREATE SEQUENCE twice_jobs_id_seq_new AS bigint;
SELECT setval('twice_jobs_id_seq_new', last_value, is_called) FROM twice_jobs_id_seq;
ALTER TABLE twice_jobs ALTER COLUMN id DROP IDENTITY;
ALTER SEQUENCE twice_jobs_id_seq_new RENAME TO twice_jobs_id_seq;

ALTER TABLE twice_jobs ADD COLUMN gen smallint NOT NULL DEFAULT 0;
ALTER TABLE twice_jobs DROP CONSTRAINT twice_jobs_pkey;
DROP INDEX twice_jobs_workflow_task;
ALTER TABLE twice_jobs RENAME TO twice_jobs_done;
ALTER INDEX twice_jobs_batch RENAME TO twice_jobs_done_batch;
ALTER INDEX twice_jobs_concurrency_key RENAME TO twice_jobs_done_concurrency_key;
ALTER INDEX twice_jobs_fetch RENAME TO twice_jobs_done_fetch;
ALTER INDEX twice_jobs_kind_id RENAME TO twice_jobs_done_kind_id;
ALTER INDEX twice_jobs_parent RENAME TO twice_jobs_done_parent;
ALTER INDEX twice_jobs_running_kind RENAME TO twice_jobs_done_running_kind;
ALTER INDEX twice_jobs_state_id RENAME TO twice_jobs_done_state_id;
ALTER INDEX twice_jobs_unique_key RENAME TO twice_jobs_done_unique_key;

CREATE TABLE twice_jobs (LIKE twice_jobs_done INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
    PARTITION BY LIST (state);
ALTER TABLE twice_jobs ALTER COLUMN id SET DEFAULT nextval('twice_jobs_id_seq');
ALTER SEQUENCE twice_jobs_id_seq OWNED BY twice_jobs.id;

CREATE TABLE twice_jobs_live PARTITION OF twice_jobs FOR VALUES IN ('available', 'running')
    PARTITION BY LIST (gen);
CREATE TABLE twice_jobs_live_0 PARTITION OF twice_jobs_live FOR VALUES IN (0);
CREATE TABLE twice_jobs_live_1 PARTITION OF twice_jobs_live FOR VALUES IN (1);

INSERT INTO twice_jobs_live_0 SELECT * FROM twice_jobs_done WHERE state IN ('available', 'running');
DELETE FROM twice_jobs_done WHERE state IN ('available', 'running');

-- The constraint proves the partition's bound, so ATTACH does not scan.
ALTER TABLE twice_jobs_done ADD CONSTRAINT twice_jobs_done_state
    CHECK (state IN ('completed', 'dead', 'discarded', 'cancelled'));
ALTER TABLE twice_jobs ATTACH PARTITION twice_jobs_done
    FOR VALUES IN ('completed', 'dead', 'discarded', 'cancelled');
ALTER TABLE twice_jobs_done DROP CONSTRAINT twice_jobs_done_state;

-- The indexes, on every partition. The done partition's own, renamed
-- above, have the same definitions and are attached, not built again.
CREATE INDEX twice_jobs_id ON twice_jobs (id);
CREATE INDEX twice_jobs_fetch ON twice_jobs (queue, priority, run_at, id) WHERE state = 'available';
CREATE INDEX twice_jobs_state_id ON twice_jobs (state, id) WHERE state <> 'running';
CREATE INDEX twice_jobs_kind_id ON twice_jobs (kind, id) WHERE state <> 'running';
CREATE INDEX twice_jobs_running_kind ON twice_jobs (kind, id) WHERE state = 'running';
CREATE INDEX twice_jobs_concurrency_key ON twice_jobs (kind, concurrency_key, id)
    WHERE concurrency_key <> '' AND state IN ('available', 'running');
CREATE INDEX twice_jobs_parent ON twice_jobs (parent_id) WHERE parent_id IS NOT NULL;
CREATE INDEX twice_jobs_workflow_task ON twice_jobs (workflow_id, workflow_task) WHERE workflow_id IS NOT NULL;
CREATE INDEX twice_jobs_batch ON twice_jobs (batch_id, id) WHERE batch_id IS NOT NULL;
CREATE INDEX twice_jobs_unique_key ON twice_jobs (kind, unique_key)
    WHERE unique_key <> '' AND (unique_states & CASE state WHEN 'available' THEN 1 WHEN 'running' THEN 2
        WHEN 'completed' THEN 4 WHEN 'dead' THEN 8 WHEN 'discarded' THEN 16 WHEN 'cancelled' THEN 32 ELSE 0 END) <> 0;

-- A retried job moves back to the live partition, and the move's insert
-- fires twice_jobs_claim_key, which takes the key back (022's statement
-- trigger did that when the row stayed in place). When another job holds
-- the key, that trigger skips the insert, and PostgreSQL completes the move
-- without it: the job would be lost. So an update whose statement lost a
-- row fails with unique_violation, as 022 failed such a retry, and the
-- statement changes nothing. The rest of 022's function is unchanged.
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
            WHEN 'completed' THEN 4 WHEN 'dead' THEN 8 WHEN 'discarded' THEN 16 WHEN 'cancelled' THEN 32 ELSE 0 END) = 0;
    RETURN NULL;
END
$$;

-- The triggers again, on the partitioned table: 022's claims, 017's
-- counters, and the finished notification, per statement now.
CREATE TRIGGER twice_jobs_claim_key BEFORE INSERT ON twice_jobs
    FOR EACH ROW
    WHEN (NEW.unique_key <> '' AND (NEW.unique_states & CASE NEW.state WHEN 'available' THEN 1 WHEN 'running' THEN 2
        WHEN 'completed' THEN 4 WHEN 'dead' THEN 8 WHEN 'discarded' THEN 16 WHEN 'cancelled' THEN 32 ELSE 0 END) <> 0)
    EXECUTE FUNCTION twice_jobs_claim_key();
CREATE TRIGGER twice_jobs_claims_moved AFTER UPDATE ON twice_jobs
    REFERENCING OLD TABLE AS old_jobs NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION twice_jobs_claims_moved();
CREATE TRIGGER twice_jobs_claims_deleted AFTER DELETE ON twice_jobs
    REFERENCING OLD TABLE AS old_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION twice_jobs_claims_deleted();
CREATE TRIGGER twice_jobs_counters AFTER UPDATE ON twice_jobs
    REFERENCING OLD TABLE AS twice_old_jobs NEW TABLE AS twice_new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION twice_jobs_counters_updated();
CREATE TRIGGER twice_jobs_counters_deleted AFTER DELETE ON twice_jobs
    REFERENCING OLD TABLE AS twice_old_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION twice_jobs_counters_deleted();

-- twice_jobs_notify_finished notifies the finish of each awaited job the
-- statement finished (013's row trigger, which a moved row does not fire).
CREATE FUNCTION twice_jobs_notify_finished() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('twice_finished', TG_TABLE_SCHEMA || ':' || n.id)
    FROM twice_new_jobs AS n
    WHERE n.awaited AND n.state IN ('completed', 'dead', 'cancelled', 'discarded')
        AND EXISTS (SELECT 1 FROM twice_old_jobs AS o WHERE o.id = n.id AND o.state <> n.state);
    RETURN NULL;
END
$$;
CREATE TRIGGER twice_jobs_finished AFTER UPDATE ON twice_jobs
    REFERENCING OLD TABLE AS twice_old_jobs NEW TABLE AS twice_new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION twice_jobs_notify_finished();
DROP FUNCTION twice_notify_finished();

-- CREATE OR REPLACE dropped 022's pin of the function it replaced.
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION twice_jobs_claims_moved() SET search_path = %I, pg_temp', current_schema());
END
$$;

ANALYZE twice_jobs;
