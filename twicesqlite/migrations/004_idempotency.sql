-- 004: request idempotency keys.
--
-- One row per (principal, key) of the HTTP Idempotency-Key middleware: the
-- request that took the key, then the response it stored for replay. A row
-- whose expires_at has passed counts as absent and is pruned. Times are
-- INTEGER unix microseconds (UTC), as in 001.

CREATE TABLE twice_idempotency (
    principal   TEXT    NOT NULL,
    key         TEXT    NOT NULL,
    fingerprint TEXT    NOT NULL,
    done        INTEGER NOT NULL DEFAULT 0 CHECK (done IN (0, 1)),
    status      INTEGER NOT NULL DEFAULT 0,  -- 0 until done
    header      TEXT    NOT NULL DEFAULT '{}', -- JSON object of string arrays
    body        BLOB    NOT NULL DEFAULT x'',
    locked_at   INTEGER NOT NULL, -- when the running request took the key
    created_at  INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL,
    PRIMARY KEY (principal, key)
);

CREATE INDEX twice_idempotency_expires_at ON twice_idempotency (expires_at);
