-- 008: reserved.
--
-- A migration 008 was written and reverted before release; a database that
-- ran it records version 8 already. This empty step keeps the numbering
-- without a gap, so such a database and a fresh one agree on what 009 and
-- later mean.

SELECT 1;
