-- 004: request idempotency keys.
--
-- One row per (principal, key) of the HTTP Idempotency-Key middleware: the
-- request that took the key, then the response it stored for replay. A row
-- whose expires_at has passed counts as absent and is pruned. Like every
-- table, it lives in the current schema.

CREATE TABLE twice_idempotency (
    principal   text        NOT NULL,
    key         text        NOT NULL,
    fingerprint text        NOT NULL,
    done        boolean     NOT NULL DEFAULT false,
    status      integer     NOT NULL DEFAULT 0,    -- 0 until done
    header      jsonb       NOT NULL DEFAULT '{}', -- object of string arrays
    body        bytea       NOT NULL DEFAULT '',
    locked_at   timestamptz NOT NULL, -- when the running request took the key
    created_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (principal, key)
);

CREATE INDEX twice_idempotency_expires_at ON twice_idempotency (expires_at);
