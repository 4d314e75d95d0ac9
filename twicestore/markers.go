package twicestore

import (
	"time"

	"github.com/twicejobs/twice/twicetype"
)

// MarkerParams name one marker.
type MarkerParams struct {
	Handler string
	Key     string
	Now     time.Time // when claiming: the processed time to record
	// JobID and Epoch, when claiming, name the delivery making the claim
	// (the job and its lease epoch). They are recorded so that a later
	// delivery of the same job can tell its own interrupted claim from
	// another message's; zero records no claimant.
	JobID int64
	Epoch int64
}

// MarkerPeekResult answers a peek.
type MarkerPeekResult struct {
	Processed bool
	// Marker is the claim found, when Processed.
	Marker *twicetype.Marker
}

// MarkerClaimResult answers a claim.
type MarkerClaimResult struct {
	AlreadyProcessed bool
	// Existing is the claim that was already there, when AlreadyProcessed.
	Existing *twicetype.Marker
}

// MarkerPruneParams select old markers (or steps, by the time they were
// claimed).
type MarkerPruneParams struct {
	Before time.Time
	Limit  int
	// From carries a pass of batches on from the batch before
	// (MarkerPruneResult.From): a batch looks at no row processed before
	// it. The rows deleted earlier in the pass lie there, and while a long
	// transaction keeps vacuum from removing them, reading past them again
	// costs a visit each, every batch. Zero starts at the oldest.
	From time.Time
}

// MarkerPruneResult counts the markers deleted.
type MarkerPruneResult struct {
	Deleted int
	// From is the From of the next batch of the same pass: the latest
	// time among the rows deleted so far in it.
	From time.Time
}
