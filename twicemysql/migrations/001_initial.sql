-- 001: the whole schema, as the other drivers reached it by their
-- migration 022 (SQLite) and 028 (PostgreSQL).
--
-- Conventions:
--   * names and keys (kinds, queues, unique keys, handlers, step and
--     schedule names, node ids) are VARBINARY of their byte caps: they
--     compare and sort by their bytes, as the seam requires whatever the
--     database's collation, and index keys stay within InnoDB's 3072 bytes;
--   * free text (notes, reasons, JSON) is utf8mb4 with a binary collation:
--     bytes that are not UTF-8 are refused (strict sql_mode), never mangled;
--   * times are DATETIME(6) in UTC; NULL is "none";
--   * TEXT and BLOB columns take expression defaults, DEFAULT (...), which
--     MySQL 8.0.13+ and MariaDB 10.2+ accept;
--   * every statement runs again harmlessly (IF NOT EXISTS), since MySQL
--     commits DDL one statement at a time.
-- A statement ends at a line that starts in the first column and ends with
-- a semicolon (see statements in migrate.go).

CREATE TABLE IF NOT EXISTS twice_jobs (
    id              BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    kind            VARBINARY(255) NOT NULL,
    queue           VARBINARY(128) NOT NULL,
    priority        INT          NOT NULL DEFAULT 0,
    args            LONGBLOB     NOT NULL,
    message_id      VARCHAR(512) NOT NULL DEFAULT '',
    idempotency_key VARCHAR(512) NOT NULL DEFAULT '',
    correlation_id  VARBINARY(512) NOT NULL DEFAULT '',
    unique_key      VARBINARY(512) NOT NULL DEFAULT '',
    state           VARCHAR(16)  NOT NULL DEFAULT 'available',
    attempt         INT          NOT NULL DEFAULT 0,
    max_attempts    INT          NOT NULL,
    epoch           BIGINT       NOT NULL DEFAULT 0,
    run_at          DATETIME(6)  NOT NULL,       -- a waiting job: when its timer fires
    lease_until     DATETIME(6)  NULL,
    attempted_by    VARCHAR(255) NOT NULL DEFAULT '',
    errors          LONGTEXT     NOT NULL DEFAULT ('[]'),       -- JSON array of attempt errors
    note            LONGTEXT     NOT NULL DEFAULT (''),
    created_at      DATETIME(6)  NOT NULL,
    finished_at     DATETIME(6)  NULL,
    metadata        LONGTEXT     NOT NULL DEFAULT ('{}'),       -- JSON object of strings
    cancel_requested_at DATETIME(6) NULL,        -- NULL: no cancel asked for
    cancel_by       VARCHAR(255) NOT NULL DEFAULT '',
    cancel_reason   TEXT         NOT NULL DEFAULT (''),
    snoozes         INT          NOT NULL DEFAULT 0,
    concurrency_key VARBINARY(255) NOT NULL DEFAULT '',
    parent_id       BIGINT       NULL,           -- the job whose completion inserted this one
    workflow_id     BIGINT       NULL,           -- NULL: not a workflow task
    workflow_task   VARBINARY(512) NOT NULL DEFAULT '',
    batch_id        BIGINT       NULL,           -- NULL: in no batch
    output          LONGBLOB     NULL,
    unique_states   INT          NOT NULL DEFAULT 3,
    trace           VARCHAR(1024) NOT NULL DEFAULT '',
    wait_name       VARBINARY(128) NOT NULL DEFAULT '', -- the wait the job last parked on
    signal_seq      BIGINT       NOT NULL DEFAULT 0,    -- signals stored for the job and timers fired for it
    -- The unique key while the job holds it: the bit of its current state
    -- is set in its unique_states (twicetype.UniqueStates). MySQL has no
    -- partial index, so the unique index is on this column, NULL (never
    -- in conflict) when the job does not hold its key.
    unique_holder   VARBINARY(512) AS (CASE WHEN unique_key <> '' AND (unique_states & CASE state
        WHEN 'available' THEN 1 WHEN 'running' THEN 2 WHEN 'waiting' THEN 2 WHEN 'completed' THEN 4
        WHEN 'dead' THEN 8 WHEN 'discarded' THEN 16 WHEN 'cancelled' THEN 32 ELSE 0 END) <> 0
        THEN unique_key END) VIRTUAL,
    -- The workflow task of a job in a workflow; NULL otherwise.
    workflow_slot   VARBINARY(512) AS (CASE WHEN workflow_id IS NOT NULL THEN workflow_task END) VIRTUAL,
    -- A waiting job's timer; NULL for a job in any other state, so its
    -- index changes only when a job parks or wakes.
    wait_due_at     DATETIME(6)  AS (CASE WHEN state = 'waiting' THEN run_at END) VIRTUAL,
    CONSTRAINT twice_jobs_state CHECK (state IN ('available', 'running', 'waiting', 'completed', 'dead', 'discarded', 'cancelled')),
    -- Every index with state in it is written at each move of a job (a
    -- lease, a finish): MySQL has no partial index to keep such an index to
    -- the rows of one state. So only the fetch index and (state, id) carry
    -- state; the others are on columns a move does not change, or on
    -- virtual columns that are NULL outside their state.
    KEY twice_jobs_fetch (state, queue, priority, run_at, id, kind),
    KEY twice_jobs_state_id (state, id),
    KEY twice_jobs_kind_id (kind, id),
    KEY twice_jobs_concurrency_key (kind, concurrency_key, id),
    KEY twice_jobs_parent (parent_id),
    UNIQUE KEY twice_jobs_workflow_task (workflow_id, workflow_slot),
    KEY twice_jobs_batch (batch_id, id),
    UNIQUE KEY twice_jobs_unique (kind, unique_holder),
    KEY twice_jobs_finished (finished_at, id),
    KEY twice_jobs_wait_due (wait_due_at, id),  -- JobWakeDue: the waiting jobs, oldest timer first
    KEY twice_jobs_correlation (correlation_id, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS twice_markers (
    handler      VARBINARY(255) NOT NULL,
    `key`        VARBINARY(512) NOT NULL,
    processed_at DATETIME(6)    NOT NULL,
    job_id       BIGINT         NULL,
    epoch        BIGINT         NULL,
    PRIMARY KEY (handler, `key`),
    KEY twice_markers_processed_at (processed_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS twice_steps (
    handler    VARBINARY(255) NOT NULL,
    `key`      VARBINARY(512) NOT NULL,
    step       VARBINARY(512) NOT NULL,
    strategy   VARCHAR(32)    NOT NULL,
    claimed_at DATETIME(6)    NOT NULL,
    done_at    DATETIME(6)    NULL,
    receipt    LONGBLOB       NULL,
    job_id     BIGINT         NOT NULL,
    epoch      BIGINT         NOT NULL,
    PRIMARY KEY (handler, `key`, step),
    KEY twice_steps_claimed_at (claimed_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS twice_signals (
    job_id    BIGINT         NOT NULL,
    name      VARBINARY(128) NOT NULL,
    payload   LONGBLOB       NULL,            -- NULL for a timeout
    timed_out TINYINT(1)     NOT NULL DEFAULT 0,
    at        DATETIME(6)    NOT NULL,
    sender    VARCHAR(255)   NOT NULL DEFAULT '',
    PRIMARY KEY (job_id, name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS twice_toggles (
    kind       VARBINARY(255) NOT NULL PRIMARY KEY, -- lower-cased by the driver
    enabled    TINYINT(1)     NOT NULL,
    reason     TEXT           NOT NULL DEFAULT (''),
    set_by     VARCHAR(255)   NOT NULL DEFAULT '',
    set_at     DATETIME(6)    NOT NULL,
    expires_at DATETIME(6)    NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS twice_toggle_history (
    id             BIGINT         NOT NULL AUTO_INCREMENT PRIMARY KEY,
    kind           VARBINARY(255) NOT NULL,  -- lower-cased, as in twice_toggles
    set_by         VARCHAR(255)   NOT NULL DEFAULT '',
    reason         TEXT           NOT NULL DEFAULT (''),
    previous_state VARCHAR(8)     NOT NULL,  -- on, off or none
    new_state      VARCHAR(8)     NOT NULL,
    source         VARCHAR(255)   NOT NULL DEFAULT 'store',
    expires_at     DATETIME(6)    NULL,
    changed_at     DATETIME(6)    NOT NULL,
    KEY twice_toggle_history_kind (kind, id),
    KEY twice_toggle_history_changed (changed_at, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS twice_schedules (
    name         VARBINARY(255) NOT NULL PRIMARY KEY,
    kind         VARBINARY(255) NOT NULL,
    spec         VARCHAR(255)   NOT NULL,
    last_tick_at DATETIME(6)    NOT NULL,  -- the tick's time from the spec, not when it ran
    last_outcome VARCHAR(16)    NOT NULL,  -- enqueued or skipped
    last_job_id  BIGINT         NOT NULL DEFAULT 0,
    next_at      DATETIME(6)    NULL,      -- NULL when the spec has no next tick
    updated_at   DATETIME(6)    NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS twice_schedule_ticks (
    name        VARBINARY(255) NOT NULL,
    tick_at     DATETIME(6)    NOT NULL,
    outcome     VARCHAR(16)    NOT NULL,
    job_id      BIGINT         NOT NULL DEFAULT 0,
    recorded_at DATETIME(6)    NOT NULL,
    PRIMARY KEY (name, tick_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS twice_idempotency (
    principal   VARBINARY(255) NOT NULL,
    `key`       VARBINARY(512) NOT NULL,
    fingerprint VARCHAR(255)   NOT NULL,
    done        TINYINT(1)     NOT NULL DEFAULT 0,
    status      INT            NOT NULL DEFAULT 0,  -- 0 until done
    header      LONGTEXT       NOT NULL DEFAULT ('{}'),            -- JSON object of string arrays
    body        LONGBLOB       NOT NULL DEFAULT (''),
    locked_at   DATETIME(6)    NOT NULL,            -- when the running request took the key
    created_at  DATETIME(6)    NOT NULL,
    expires_at  DATETIME(6)    NOT NULL,
    PRIMARY KEY (principal, `key`),
    KEY twice_idempotency_expires_at (expires_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS twice_nodes (
    id           VARBINARY(255) NOT NULL PRIMARY KEY,
    host         VARCHAR(255)   NOT NULL DEFAULT '',
    pid          BIGINT         NOT NULL DEFAULT 0,
    kinds        LONGTEXT       NOT NULL DEFAULT ('[]'),  -- JSON array of kinds handled
    queues       LONGTEXT       NOT NULL DEFAULT ('[]'),  -- JSON array of queues worked
    started_at   DATETIME(6)    NOT NULL,
    heartbeat_at DATETIME(6)    NOT NULL,
    KEY twice_nodes_heartbeat (heartbeat_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS twice_queue_pauses (
    queue     VARBINARY(128) NOT NULL PRIMARY KEY,
    paused_at DATETIME(6)    NOT NULL,
    until     DATETIME(6)    NULL,       -- NULL: until resumed
    paused_by VARCHAR(255)   NOT NULL DEFAULT '',
    reason    TEXT           NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS twice_kinds (
    kind         VARBINARY(255) NOT NULL PRIMARY KEY,
    queue        VARBINARY(128) NOT NULL,
    strategy     VARCHAR(64)    NOT NULL DEFAULT '',
    fail_closed  TINYINT(1)     NOT NULL,
    max_attempts INT            NOT NULL DEFAULT 0,
    timeout_us   BIGINT         NOT NULL DEFAULT 0,  -- 0: no per-job timeout
    args         LONGTEXT       NOT NULL,            -- JSON array of {name, type, sensitive}
    schedules    LONGTEXT       NOT NULL DEFAULT ('[]'),            -- JSON array of {name, spec}
    node         VARBINARY(255) NOT NULL,            -- the node that last published the kind
    last_seen    DATETIME(6)    NOT NULL,            -- when it did
    limits       LONGTEXT       NOT NULL DEFAULT ('{}'),            -- JSON: driverkit's stored form of the kind's limits
    handler_name VARBINARY(255) NOT NULL DEFAULT ''
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS twice_rate_starts (
    kind VARBINARY(255) NOT NULL,
    `key` VARBINARY(255) NOT NULL,
    at   DATETIME(6)    NOT NULL,
    KEY twice_rate_starts_window (kind, `key`, at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- One row per limited kind, locked (FOR UPDATE) by every fetch that may
-- lease the kind's jobs, until it commits: limited fetches of a kind run
-- one after the other on every node, each counting what the one before it
-- leased (PostgreSQL uses an advisory lock; MySQL's named locks belong to
-- the session, not the transaction).
CREATE TABLE IF NOT EXISTS twice_limit_locks (
    kind VARBINARY(255) NOT NULL PRIMARY KEY
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS twice_limit_overrides (
    scope   VARCHAR(8)     NOT NULL,  -- kind or queue
    name    VARBINARY(255) NOT NULL,
    setting LONGTEXT       NOT NULL,  -- JSON: driverkit's stored form of a LimitSetting
    set_by  VARCHAR(255)   NOT NULL DEFAULT '',
    reason  TEXT           NOT NULL DEFAULT (''),
    set_at  DATETIME(6)    NOT NULL,
    PRIMARY KEY (scope, name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS twice_limit_history (
    id         BIGINT         NOT NULL AUTO_INCREMENT PRIMARY KEY,
    scope      VARCHAR(8)     NOT NULL,
    name       VARBINARY(255) NOT NULL,
    previous   LONGTEXT       NULL,     -- JSON: the override before; NULL for none
    new        LONGTEXT       NULL,     -- JSON: the override set; NULL for a reset
    set_by     VARCHAR(255)   NOT NULL DEFAULT '',
    reason     TEXT           NOT NULL DEFAULT (''),
    changed_at DATETIME(6)    NOT NULL,
    KEY twice_limit_history_name (scope, name, id),
    KEY twice_limit_history_changed (changed_at, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS twice_workflows (
    id          BIGINT         NOT NULL AUTO_INCREMENT PRIMARY KEY,
    name        VARBINARY(512) NOT NULL,
    on_dead     VARCHAR(8)     NOT NULL DEFAULT 'hold',     -- hold or cancel
    state       VARCHAR(16)    NOT NULL DEFAULT 'running',  -- running, completed, failed or cancelled
    tasks       INT            NOT NULL,
    completed   INT            NOT NULL DEFAULT 0,
    dead        INT            NOT NULL DEFAULT 0,  -- tasks whose job is dead, discarded or cancelled now
    created_at  DATETIME(6)    NOT NULL,
    finished_at DATETIME(6)    NULL,
    KEY twice_workflows_state (state, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS twice_workflow_tasks (
    workflow_id     BIGINT         NOT NULL,
    name            VARBINARY(512) NOT NULL,
    pending         INT            NOT NULL,                   -- dependencies not completed yet
    state           VARCHAR(16)    NOT NULL DEFAULT 'waiting', -- waiting, ready (its job is due: the driver inserts it), enqueued or cancelled
    released_at     DATETIME(6)    NULL,                       -- when its last dependency completed
    kind            VARBINARY(255) NOT NULL,
    queue           VARBINARY(128) NOT NULL,
    priority        INT            NOT NULL DEFAULT 0,
    args            LONGBLOB       NOT NULL,
    message_id      VARCHAR(512)   NOT NULL DEFAULT '',
    idempotency_key VARCHAR(512)   NOT NULL DEFAULT '',
    correlation_id  VARBINARY(512) NOT NULL DEFAULT '',
    max_attempts    INT            NOT NULL,
    metadata        LONGTEXT       NOT NULL DEFAULT ('{}'),
    concurrency_key VARBINARY(255) NOT NULL DEFAULT '',
    run_at          DATETIME(6)    NULL,
    PRIMARY KEY (workflow_id, name),
    KEY twice_workflow_tasks_state (state),
    CONSTRAINT twice_workflow_tasks_workflow FOREIGN KEY (workflow_id) REFERENCES twice_workflows (id) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS twice_workflow_deps (
    workflow_id BIGINT         NOT NULL,
    dep         VARBINARY(512) NOT NULL,
    task        VARBINARY(512) NOT NULL,
    PRIMARY KEY (workflow_id, dep, task),
    KEY twice_workflow_deps_task (workflow_id, task),
    CONSTRAINT twice_workflow_deps_workflow FOREIGN KEY (workflow_id) REFERENCES twice_workflows (id) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS twice_batches (
    id              BIGINT         NOT NULL AUTO_INCREMENT PRIMARY KEY,
    on_success      TINYINT(1)     NOT NULL DEFAULT 0,  -- 1: the callback only when no job is dead or cancelled
    sealed          TINYINT(1)     NOT NULL DEFAULT 1,  -- 0: open, jobs may still be added
    total           INT            NOT NULL DEFAULT 0,
    pending         INT            NOT NULL DEFAULT 0,
    completed       INT            NOT NULL DEFAULT 0,
    dead            INT            NOT NULL DEFAULT 0,  -- dead or discarded
    cancelled       INT            NOT NULL DEFAULT 0,
    callback_state  INT            NOT NULL DEFAULT 0,  -- 0 not fired, 1 due (the driver inserts it), 2 fired
    callback_job_id BIGINT         NULL,
    callback_parent_id BIGINT      NULL,            -- the job whose finish made the callback due
    kind            VARBINARY(255) NOT NULL,            -- the callback job
    queue           VARBINARY(128) NOT NULL,
    priority        INT            NOT NULL DEFAULT 0,
    args            LONGBLOB       NOT NULL,
    message_id      VARCHAR(512)   NOT NULL DEFAULT '',
    idempotency_key VARCHAR(512)   NOT NULL DEFAULT '',
    correlation_id  VARBINARY(512) NOT NULL DEFAULT '',
    max_attempts    INT            NOT NULL,
    metadata        LONGTEXT       NOT NULL DEFAULT ('{}'),
    concurrency_key VARBINARY(255) NOT NULL DEFAULT '',
    created_at      DATETIME(6)    NOT NULL,
    finished_at     DATETIME(6)    NULL,
    KEY twice_batches_callback (callback_state, id),
    KEY twice_batches_finished (finished_at, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
