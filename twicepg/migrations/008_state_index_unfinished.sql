-- 008: completed jobs leave the (state, id) index.
--
-- Completed jobs are most of the table, and every completion wrote an entry
-- for them here that no query needs: listing completed jobs newest first,
-- and retention deleting the oldest, walk the primary key instead (completed
-- rows are the common case there, so the walk stops at once). Keeping them
-- out saves an index write per job and keeps the index the size of the
-- backlog and the dead letters, not of the history.
--
-- On a large existing table this rebuild holds a write lock while it runs;
-- upgrade outside peak hours.

DROP INDEX twice_jobs_state_id;
CREATE INDEX twice_jobs_state_id ON twice_jobs (state, id) WHERE state <> 'completed';
