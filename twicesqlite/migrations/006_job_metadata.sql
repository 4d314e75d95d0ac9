-- 006: job metadata.
--
-- String pairs the system carries with a job from its enqueuer to its
-- handler, such as the W3C trace context (traceparent), as a JSON object.
-- Not the payload: args stay the user's.

ALTER TABLE twice_jobs ADD COLUMN metadata TEXT NOT NULL DEFAULT '{}';
