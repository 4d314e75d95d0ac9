-- 002: kill switches.
--
-- One row per job kind that an operator turned on or off (from the CLI or
-- the dashboard); a kind without a row follows its other sources and its
-- registration default. Like every table, it lives in the current schema.

CREATE TABLE twice_toggles (
    kind    text        NOT NULL PRIMARY KEY, -- lower-cased by the driver: keys are case-insensitive
    enabled boolean     NOT NULL,
    reason  text        NOT NULL DEFAULT '',
    set_by  text        NOT NULL DEFAULT '',
    set_at  timestamptz NOT NULL
);
