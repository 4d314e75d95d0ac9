-- 010: switch expiry and history, and the kind catalog.
--
-- A stored kill switch may expire: from expires_at on it counts as absent
-- (ToggleList leaves it out). Every set and delete of a switch appends a
-- row to twice_toggle_history in the same transaction; rows are never
-- updated, so the history still says who flipped a switch before the last
-- flip. twice_kinds is the kind catalog: one row per kind any node ever
-- published, kept after the node stops.

ALTER TABLE twice_toggles ADD COLUMN expires_at timestamptz; -- NULL: never expires

CREATE TABLE twice_toggle_history (
    id             bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind           text        NOT NULL, -- lower-cased, as in twice_toggles
    set_by         text        NOT NULL DEFAULT '',
    reason         text        NOT NULL DEFAULT '',
    previous_state text        NOT NULL CHECK (previous_state IN ('on', 'off', 'none')),
    new_state      text        NOT NULL CHECK (new_state IN ('on', 'off', 'none')),
    source         text        NOT NULL DEFAULT 'store',
    expires_at     timestamptz,          -- the expiry the change set; NULL for none
    changed_at     timestamptz NOT NULL
);

CREATE INDEX twice_toggle_history_kind ON twice_toggle_history (kind, id);

CREATE TABLE twice_kinds (
    kind         text        NOT NULL PRIMARY KEY,
    queue        text        NOT NULL,
    strategy     text        NOT NULL DEFAULT '',
    fail_closed  boolean     NOT NULL,
    max_attempts integer     NOT NULL DEFAULT 0,
    timeout_us   bigint      NOT NULL DEFAULT 0, -- 0: no per-job timeout
    args         jsonb       NOT NULL DEFAULT '[]', -- array of {name, type, sensitive}
    schedules    jsonb       NOT NULL DEFAULT '[]', -- array of {name, spec}
    node         text        NOT NULL,              -- the node that last published the kind
    last_seen    timestamptz NOT NULL               -- when it did
);
