-- 014: the states in which a job holds its unique key.
--
-- unique_states is a bitmask with one fixed bit per state, documented on
-- twicetype.UniqueStates: available 1, running 2, completed 4, dead 8,
-- discarded 16, cancelled 32. Existing rows get available|running, which
-- is what the old index covered, so they keep their behaviour.
ALTER TABLE twice_jobs ADD COLUMN unique_states integer NOT NULL DEFAULT 3;

-- The unique index now covers a row while its current state's bit is set
-- in its own unique_states: a completed job keeps its key when its states
-- include completed, and the database still settles insert races. Only
-- immutable expressions can go in an index predicate: text comparison, a
-- CASE over them and an integer & are. Queries that must use the index
-- (or agree with it) repeat this predicate word for word (uniqueHeldSQL).
DROP INDEX twice_jobs_unique;
CREATE UNIQUE INDEX twice_jobs_unique ON twice_jobs (kind, unique_key)
    WHERE unique_key <> '' AND (unique_states & CASE state WHEN 'available' THEN 1 WHEN 'running' THEN 2
        WHEN 'completed' THEN 4 WHEN 'dead' THEN 8 WHEN 'discarded' THEN 16 WHEN 'cancelled' THEN 32 ELSE 0 END) <> 0;
