-- 027: find jobs by correlation id and by metadata.
--
-- An operator following one request through the system lists its jobs by
-- correlation id, or by a metadata pair (a tenant, a trace); a bulk cancel
-- or retry selects them the same way. Both indexes leave running rows out,
-- as twice_jobs_state_id and twice_jobs_kind_id do (021): a job's state
-- changes are not HOT, so an index holding running rows takes an entry on
-- every lease, the hottest write there is. Running jobs are few (the
-- workers' slots), and a filter that does not fix the state reads them
-- through twice_jobs_running_kind, whose predicate the driver's literal
-- "state = 'running' OR state <> 'running'" lets every plan prove.
--
-- twice_jobs_correlation is a btree by (correlation_id, id), so a listing
-- reads the newest jobs of one id first and stops at its page.
-- twice_jobs_metadata is a GIN index of the metadata's key/value pairs
-- (jsonb_path_ops: containment, @>, is the one question asked) over the
-- jobs that carry any; the driver repeats "metadata <> '{}'" for the
-- planner. Both are built on every partition of twice_jobs.
--
-- The build takes a write lock on twice_jobs while it reads the table.

CREATE INDEX twice_jobs_correlation ON twice_jobs (correlation_id, id) WHERE state <> 'running';
CREATE INDEX twice_jobs_metadata ON twice_jobs USING gin (metadata jsonb_path_ops)
    WHERE metadata <> '{}' AND state <> 'running';
