-- 022: unique keys are held in a table of their own.
--
-- Until now a unique index on twice_jobs (kind, unique_key), partial on the
-- holding states (014), settled who holds a key. A unique index on a
-- partitioned table must contain the partition key, so it can only say "one
-- holder per partition". twice_jobs is to be split into partitions (the
-- jobs that live and the finished ones, and the live ones in generations
-- that are truncated in turn, so that dead row versions are bounded while
-- another session holds a snapshot). This migration moves the rule to
-- twice_unique_claims, which is never partitioned, and changes nothing a
-- user sees:
--
--   - An insert claims its key in a BEFORE INSERT trigger. When the key is
--     held the trigger skips the row, which is what the inserts' ON CONFLICT
--     DO NOTHING did on the unique index; a claim being written by another
--     transaction is waited for, as the index waited.
--   - A statement that moves jobs out of a state that holds their key
--     releases the claims in the same statement; one that moves jobs back
--     into holding it (a retry) claims again, and fails with
--     unique_violation (23505) when another job holds the key, as the
--     index made it fail. Only a retry does that (twicetype.UniqueStates).
--   - Deleting a job releases its claim.
--
-- The index on (kind, unique_key) stays, no longer unique, for the queries
-- that look up a key's holder (driverkit.UniqueHeldSQL is its predicate).
-- A job of a unique kind pays one more row and index entry, written at
-- insert and removed when the job stops holding its key; other jobs pay
-- one scan of each updating statement's rows.
--
-- The predicate below is driverkit.UniqueHeldSQL's, repeated in full as in
-- 014: the bit of the row's state, set in its own unique_states.

CREATE TABLE twice_unique_claims (
    kind       text   NOT NULL,
    unique_key text   NOT NULL,
    job_id     bigint NOT NULL,
    PRIMARY KEY (kind, unique_key)
);

INSERT INTO twice_unique_claims (kind, unique_key, job_id)
SELECT kind, unique_key, id FROM twice_jobs
WHERE unique_key <> '' AND (unique_states & CASE state WHEN 'available' THEN 1 WHEN 'running' THEN 2
    WHEN 'completed' THEN 4 WHEN 'dead' THEN 8 WHEN 'discarded' THEN 16 WHEN 'cancelled' THEN 32 ELSE 0 END) <> 0;

CREATE INDEX twice_jobs_unique_key ON twice_jobs (kind, unique_key)
    WHERE unique_key <> '' AND (unique_states & CASE state WHEN 'available' THEN 1 WHEN 'running' THEN 2
        WHEN 'completed' THEN 4 WHEN 'dead' THEN 8 WHEN 'discarded' THEN 16 WHEN 'cancelled' THEN 32 ELSE 0 END) <> 0;
DROP INDEX twice_jobs_unique;

-- twice_jobs_claim_key claims a new job's key, or skips the job when
-- another holds it (FOUND is false when ON CONFLICT did nothing). A row
-- that already holds the claim goes in: an update that moves a job to
-- another partition inserts it there, and fires this trigger.
CREATE FUNCTION twice_jobs_claim_key() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO twice_unique_claims (kind, unique_key, job_id) VALUES (NEW.kind, NEW.unique_key, NEW.id)
    ON CONFLICT DO NOTHING;
    IF FOUND OR EXISTS (SELECT 1 FROM twice_unique_claims
        WHERE kind = NEW.kind AND unique_key = NEW.unique_key AND job_id = NEW.id) THEN
        RETURN NEW;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER twice_jobs_claim_key BEFORE INSERT ON twice_jobs
    FOR EACH ROW
    WHEN (NEW.unique_key <> '' AND (NEW.unique_states & CASE NEW.state WHEN 'available' THEN 1 WHEN 'running' THEN 2
        WHEN 'completed' THEN 4 WHEN 'dead' THEN 8 WHEN 'discarded' THEN 16 WHEN 'cancelled' THEN 32 ELSE 0 END) <> 0)
    EXECUTE FUNCTION twice_jobs_claim_key();

-- twice_jobs_claims_moved follows an updating statement's jobs into and
-- out of holding their keys. Most statements (fetches, heartbeats, jobs
-- without a key) end after one scan of their new rows.
CREATE FUNCTION twice_jobs_claims_moved() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM new_jobs WHERE unique_key <> '') THEN
        RETURN NULL;
    END IF;
    DELETE FROM twice_unique_claims AS c
    USING new_jobs AS n
    WHERE n.unique_key <> '' AND c.kind = n.kind AND c.unique_key = n.unique_key AND c.job_id = n.id
        AND (n.unique_states & CASE n.state WHEN 'available' THEN 1 WHEN 'running' THEN 2
            WHEN 'completed' THEN 4 WHEN 'dead' THEN 8 WHEN 'discarded' THEN 16 WHEN 'cancelled' THEN 32 ELSE 0 END) = 0;
    INSERT INTO twice_unique_claims (kind, unique_key, job_id)
    SELECT n.kind, n.unique_key, n.id
    FROM new_jobs AS n JOIN old_jobs AS o ON o.id = n.id
    WHERE n.unique_key <> ''
        AND (n.unique_states & CASE n.state WHEN 'available' THEN 1 WHEN 'running' THEN 2
            WHEN 'completed' THEN 4 WHEN 'dead' THEN 8 WHEN 'discarded' THEN 16 WHEN 'cancelled' THEN 32 ELSE 0 END) <> 0
        AND (o.unique_states & CASE o.state WHEN 'available' THEN 1 WHEN 'running' THEN 2
            WHEN 'completed' THEN 4 WHEN 'dead' THEN 8 WHEN 'discarded' THEN 16 WHEN 'cancelled' THEN 32 ELSE 0 END) = 0
    ORDER BY n.kind, n.unique_key;
    RETURN NULL;
END
$$;

CREATE TRIGGER twice_jobs_claims_moved AFTER UPDATE ON twice_jobs
    REFERENCING OLD TABLE AS old_jobs NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION twice_jobs_claims_moved();

-- twice_jobs_claims_deleted releases the claims of deleted jobs.
CREATE FUNCTION twice_jobs_claims_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM twice_unique_claims AS c
    USING old_jobs AS o
    WHERE o.unique_key <> '' AND c.kind = o.kind AND c.unique_key = o.unique_key AND c.job_id = o.id;
    RETURN NULL;
END
$$;

CREATE TRIGGER twice_jobs_claims_deleted AFTER DELETE ON twice_jobs
    REFERENCING OLD TABLE AS old_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION twice_jobs_claims_deleted();

-- Pin the three functions to this schema, as 019 pins its own: a statement
-- on myschema.twice_jobs from a session whose search_path differs still
-- claims in myschema.
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION twice_jobs_claim_key() SET search_path = %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION twice_jobs_claims_moved() SET search_path = %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION twice_jobs_claims_deleted() SET search_path = %I, pg_temp', current_schema());
END
$$;
