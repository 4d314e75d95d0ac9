-- 026: limits in the kind catalog, and runtime limit overrides with their
-- history (twicestore.LimitOverrider).
--
-- twice_kinds.limits is each kind's flow control as its node registers it
-- (KindOpts' limits), in driverkit's stored form; '{}' is no limit, and
-- what every kind published before this migration reads as until its
-- node publishes again.
--
-- twice_limit_overrides holds what an operator set at runtime instead of
-- the compiled values: a kind's limits (scope 'kind', name the kind
-- lower-cased) or a queue's concurrency on each worker (scope 'queue').
-- Every set and clear appends a row to twice_limit_history in the same
-- transaction; rows are never updated, and retention keeps each
-- override's newest row whatever its age (as the switch history's).

ALTER TABLE twice_kinds ADD COLUMN limits jsonb NOT NULL DEFAULT '{}';

CREATE TABLE twice_limit_overrides (
    scope   text        NOT NULL CHECK (scope IN ('kind', 'queue')),
    name    text        NOT NULL,
    setting jsonb       NOT NULL, -- driverkit's stored form of a LimitSetting
    set_by  text        NOT NULL DEFAULT '',
    reason  text        NOT NULL DEFAULT '',
    set_at  timestamptz NOT NULL,
    PRIMARY KEY (scope, name)
);

CREATE TABLE twice_limit_history (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    scope      text        NOT NULL CHECK (scope IN ('kind', 'queue')),
    name       text        NOT NULL,
    previous   jsonb,                -- the override before; NULL for none
    new        jsonb,                -- the override set; NULL for a reset
    set_by     text        NOT NULL DEFAULT '',
    reason     text        NOT NULL DEFAULT '',
    changed_at timestamptz NOT NULL
);

CREATE INDEX twice_limit_history_name ON twice_limit_history (scope, name, id);
