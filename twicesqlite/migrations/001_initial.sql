-- 001: jobs, markers and nodes.
--
-- Times are INTEGER unix microseconds (UTC), the precision PostgreSQL keeps,
-- so both drivers round-trip the same values and integer comparison sorts
-- them. A zero time.Time is stored as NULL where the column may be unset.

CREATE TABLE twice_jobs (
    id              INTEGER PRIMARY KEY AUTOINCREMENT, -- never reused: ids are keyset cursors
    kind            TEXT    NOT NULL,
    queue           TEXT    NOT NULL,
    priority        INTEGER NOT NULL DEFAULT 0,
    args            BLOB    NOT NULL,
    message_id      TEXT    NOT NULL DEFAULT '',
    idempotency_key TEXT    NOT NULL DEFAULT '',
    correlation_id  TEXT    NOT NULL DEFAULT '',
    unique_key      TEXT    NOT NULL DEFAULT '',
    state           TEXT    NOT NULL DEFAULT 'available'
        CHECK (state IN ('available', 'running', 'completed', 'dead', 'discarded')),
    attempt         INTEGER NOT NULL DEFAULT 0,
    max_attempts    INTEGER NOT NULL,
    epoch           INTEGER NOT NULL DEFAULT 0,
    run_at          INTEGER NOT NULL,
    lease_until     INTEGER,
    attempted_by    TEXT    NOT NULL DEFAULT '',
    errors          TEXT    NOT NULL DEFAULT '[]', -- JSON array of attempt errors
    note            TEXT    NOT NULL DEFAULT '',
    created_at      INTEGER NOT NULL,
    finished_at     INTEGER
);

-- Fetch reads this index in order and stops at its LIMIT; being partial, its
-- size follows the backlog, not the history of finished jobs. The trailing
-- kind lets fetch skip jobs of kinds it does not handle (held or orphaned)
-- without reading their rows.
CREATE INDEX twice_jobs_fetch ON twice_jobs (queue, priority, run_at, id, kind)
    WHERE state = 'available';

-- Rescue finds expired leases without scanning finished jobs.
CREATE INDEX twice_jobs_rescue ON twice_jobs (lease_until)
    WHERE state = 'running';

-- The unique option: one unfinished job per kind and unique key. Finished
-- jobs leave the index, so the key can be used again.
CREATE UNIQUE INDEX twice_jobs_unique ON twice_jobs (kind, unique_key)
    WHERE unique_key <> '' AND state IN ('available', 'running');

-- Listing newest first by state (dead letters, the backlog) or by kind;
-- (state, id) also serves counting a state and finding orphaned kinds among
-- the available jobs. Every index on state costs two b-tree writes per state
-- change, so there is deliberately no (state, queue, kind) index: it made a
-- 100k-job burn-down a quarter slower to speed up only dashboard counts.
CREATE INDEX twice_jobs_state_id ON twice_jobs (state, id);
CREATE INDEX twice_jobs_kind_id ON twice_jobs (kind, id);

CREATE TABLE twice_markers (
    handler      TEXT    NOT NULL,
    key          TEXT    NOT NULL,
    processed_at INTEGER NOT NULL,
    PRIMARY KEY (handler, key)
);

-- Pruning deletes the oldest markers first.
CREATE INDEX twice_markers_processed_at ON twice_markers (processed_at);

CREATE TABLE twice_nodes (
    id           TEXT    NOT NULL PRIMARY KEY,
    host         TEXT    NOT NULL DEFAULT '',
    pid          INTEGER NOT NULL DEFAULT 0,
    kinds        TEXT    NOT NULL DEFAULT '[]', -- JSON array of kinds handled
    queues       TEXT    NOT NULL DEFAULT '[]', -- JSON array of queues worked
    started_at   INTEGER NOT NULL,
    heartbeat_at INTEGER NOT NULL
);
