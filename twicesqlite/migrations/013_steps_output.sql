-- 013: named steps with receipts, job output.
--
-- twice_steps holds one row per (handler, message key, step) of a stepped
-- handler (twice.Step): claimed by a delivery (job_id, epoch), done once
-- its receipt is stored. A redelivered job reads the receipt of a done
-- step instead of running it again; a claim-before step claimed but not
-- done means its effect may have happened, which a human must settle.
-- Times are unix microseconds, as everywhere.
CREATE TABLE twice_steps (
    handler    TEXT    NOT NULL,
    key        TEXT    NOT NULL,
    step       TEXT    NOT NULL,
    strategy   TEXT    NOT NULL,
    claimed_at INTEGER NOT NULL,
    done_at    INTEGER,
    receipt    TEXT,
    job_id     INTEGER NOT NULL,
    epoch      INTEGER NOT NULL,
    PRIMARY KEY (handler, key, step)
) WITHOUT ROWID;
-- Pruning deletes the oldest steps first.
CREATE INDEX twice_steps_claimed_at ON twice_steps (claimed_at);

-- A job's output (twice.RecordOutput), written with its completion.
ALTER TABLE twice_jobs ADD COLUMN output TEXT;
