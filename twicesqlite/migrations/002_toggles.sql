-- 002: kill switches.
--
-- One row per job kind that an operator turned on or off (from the CLI or
-- the dashboard); a kind without a row follows its other sources and its
-- registration default. Times are INTEGER unix microseconds (UTC), as in 001.

CREATE TABLE twice_toggles (
    kind    TEXT    NOT NULL PRIMARY KEY, -- lower-cased by the driver: keys are case-insensitive
    enabled INTEGER NOT NULL CHECK (enabled IN (0, 1)),
    reason  TEXT    NOT NULL DEFAULT '',
    set_by  TEXT    NOT NULL DEFAULT '',
    set_at  INTEGER NOT NULL
);
