-- 016: no index on lease_until (PostgreSQL's 015).
--
-- twice_jobs_rescue indexed the running jobs by lease_until: every fetch
-- (available -> running) inserted an entry, every completion deleted it,
-- and every heartbeat moved it. Rescue reads the running jobs through the
-- partial index on (kind) WHERE state = 'running' (011) instead: there are
-- at most as many as the workers' slots, so sorting them by lease_until
-- is cheap.

DROP INDEX IF EXISTS twice_jobs_rescue;
