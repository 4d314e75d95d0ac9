-- 013: named steps with receipts, job output, awaited jobs.
--
-- twice_steps holds one row per (handler, message key, step) of a stepped
-- handler (twice.Step): claimed by a delivery (job_id, epoch), done once
-- its receipt is stored. A redelivered job reads the receipt of a done
-- step instead of running it again; a claim-before step claimed but not
-- done means its effect may have happened, which a human must settle.
CREATE TABLE twice_steps (
    handler    text        NOT NULL,
    key        text        NOT NULL,
    step       text        NOT NULL,
    strategy   text        NOT NULL,
    claimed_at timestamptz NOT NULL,
    done_at    timestamptz,
    receipt    text,
    job_id     bigint      NOT NULL,
    epoch      bigint      NOT NULL,
    PRIMARY KEY (handler, key, step)
);
-- Pruning deletes the oldest steps first.
CREATE INDEX twice_steps_claimed_at ON twice_steps (claimed_at);

-- A job's output (twice.RecordOutput), written with its completion.
ALTER TABLE twice_jobs ADD COLUMN output text;

-- awaited is set by Client.Wait; only an awaited job's finish is
-- notified, so jobs nobody waits for pay nothing at commit (NOTIFY takes a
-- database-wide lock when its transaction commits).
ALTER TABLE twice_jobs ADD COLUMN awaited boolean NOT NULL DEFAULT false;

CREATE FUNCTION twice_notify_finished() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('twice_finished', TG_TABLE_SCHEMA || ':' || NEW.id);
    RETURN NULL;
END
$$;

-- On finished_at, not state: every write into a finished state sets it and
-- the fetch and the heartbeat do not, so those statements carry no
-- trigger at all (as 012's triggers).
CREATE TRIGGER twice_jobs_finished AFTER UPDATE OF finished_at ON twice_jobs
    FOR EACH ROW
    WHEN (NEW.awaited AND NEW.state IN ('completed', 'dead', 'cancelled', 'discarded') AND OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION twice_notify_finished();
