-- 014: placeholder on branch throughput only, so that 015 loads (migrations
-- are numbered without gaps). The lead drops this file when merging: the
-- other branches' 014 takes its place.

SELECT 1;
