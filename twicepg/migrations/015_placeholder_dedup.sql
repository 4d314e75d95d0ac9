-- 015: placeholder on branch dedup only, so that 016 loads (migrations are
-- numbered without gaps). The lead drops this file when merging: the other
-- branches' 015 takes its place.

SELECT 1;
