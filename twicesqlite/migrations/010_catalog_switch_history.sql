-- 010: switch expiry and history, and the kind catalog.
--
-- A stored kill switch may expire: from expires_at on it counts as absent
-- (ToggleList leaves it out). Every set and delete of a switch appends a
-- row to twice_toggle_history in the same transaction; rows are never
-- updated, so the history still says who flipped a switch before the last
-- flip. twice_kinds is the kind catalog: one row per kind any node ever
-- published, kept after the node stops. Times are INTEGER unix
-- microseconds (UTC), as in 001.

ALTER TABLE twice_toggles ADD COLUMN expires_at INTEGER; -- NULL: never expires

CREATE TABLE twice_toggle_history (
    id             INTEGER PRIMARY KEY AUTOINCREMENT, -- AUTOINCREMENT: ids never go back, so they order the history
    kind           TEXT    NOT NULL,                  -- lower-cased, as in twice_toggles
    set_by         TEXT    NOT NULL DEFAULT '',
    reason         TEXT    NOT NULL DEFAULT '',
    previous_state TEXT    NOT NULL CHECK (previous_state IN ('on', 'off', 'none')),
    new_state      TEXT    NOT NULL CHECK (new_state IN ('on', 'off', 'none')),
    source         TEXT    NOT NULL DEFAULT 'store',
    expires_at     INTEGER,                           -- the expiry the change set; NULL for none
    changed_at     INTEGER NOT NULL
);

CREATE INDEX twice_toggle_history_kind ON twice_toggle_history (kind, id);

CREATE TABLE twice_kinds (
    kind         TEXT    NOT NULL PRIMARY KEY,
    queue        TEXT    NOT NULL,
    strategy     TEXT    NOT NULL DEFAULT '',
    fail_closed  INTEGER NOT NULL CHECK (fail_closed IN (0, 1)),
    max_attempts INTEGER NOT NULL DEFAULT 0,
    timeout_us   INTEGER NOT NULL DEFAULT 0, -- 0: no per-job timeout
    args         TEXT    NOT NULL DEFAULT '[]', -- JSON array of {name, type, sensitive}
    schedules    TEXT    NOT NULL DEFAULT '[]', -- JSON array of {name, spec}
    node         TEXT    NOT NULL,              -- the node that last published the kind
    last_seen    INTEGER NOT NULL               -- when it did
);
