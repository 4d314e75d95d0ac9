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

// MarkerPruneParams select old markers.
type MarkerPruneParams struct {
	Before time.Time
	Limit  int
}

// MarkerPruneResult counts the markers deleted.
type MarkerPruneResult struct {
	Deleted int
}
