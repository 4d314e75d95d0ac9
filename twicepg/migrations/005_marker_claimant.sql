-- 005: who claimed a marker.
--
-- The job and lease epoch of the delivery that wrote the claim. A
-- claim-before job redelivered after a crash finds its own claim from an
-- older epoch, which means the effect may have happened: the job goes to
-- the dead-letter queue instead of completing as a silent no-op. NULL for
-- claims written before this migration, which name no claimant.

ALTER TABLE twice_markers ADD COLUMN job_id BIGINT;
ALTER TABLE twice_markers ADD COLUMN epoch BIGINT;
