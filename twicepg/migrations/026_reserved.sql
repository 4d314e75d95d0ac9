-- 026: reserved.
--
-- Another change takes 026; this empty step keeps the numbering without a
-- gap until it lands. Replace this file with it.

SELECT 1;
