-- 021: find jobs by correlation id (PostgreSQL's 027).
--
-- An operator following one request through the system lists its jobs by
-- correlation id; a bulk cancel or retry selects them the same way. The
-- index is by (correlation_id, id), so a listing reads the newest jobs of
-- one id first and stops at its page.
--
-- Metadata has no index here: an expression index on json_extract serves
-- one key named in advance, and a filter may name any key. A metadata
-- filter reads the jobs the filter's other conditions leave, newest first,
-- until its page is full.

CREATE INDEX twice_jobs_correlation ON twice_jobs (correlation_id, id);
