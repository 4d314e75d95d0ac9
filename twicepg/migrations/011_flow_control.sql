-- 011: flow control (global and per-key concurrency, rate limits).
--
-- Limits are not stored: every node states them in its registry and each
-- fetch carries them. What is stored is what they bound. A slot is a
-- running job, counted from twice_jobs itself, so a crashed node leaks no
-- slot: its jobs leave running when rescued. concurrency_key partitions a
-- kind's jobs (a tenant, a customer) for the per-key limits; '' is no key.
-- twice_rate_starts is the sliding-window log of the rate limits: one row
-- per start of a rate-limited job (key '' for the kind's own window, the
-- job's key for its key's window), pruned by the fetches that write it.

ALTER TABLE twice_jobs ADD COLUMN concurrency_key text NOT NULL DEFAULT '';

-- The global limit counts a kind's running jobs.
CREATE INDEX twice_jobs_running_kind ON twice_jobs (kind) WHERE state = 'running';

-- The per-key limit counts, per job it considers, the unfinished jobs of
-- its key enqueued before it and the running ones.
CREATE INDEX twice_jobs_concurrency_key ON twice_jobs (kind, concurrency_key, id)
    WHERE concurrency_key <> '' AND state IN ('available', 'running');

CREATE TABLE twice_rate_starts (
    kind text        NOT NULL,
    key  text        NOT NULL,
    at   timestamptz NOT NULL
);
CREATE INDEX twice_rate_starts_window ON twice_rate_starts (kind, key, at);
