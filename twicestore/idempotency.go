package twicestore

import (
	"time"

	"github.com/twicejobs/twice/twicetype"
)

// IdempotencyKeyParams name one record.
type IdempotencyKeyParams struct {
	Principal string
	Key       string
	// LockedAt, when set, is the lock the caller holds (Begin's
	// Record.LockedAt, or its last Extend's): the call then acts only
	// while that lock still holds the key, so a request whose key was
	// taken over cannot touch the newer request's record. Zero acts on the
	// record whatever holds it.
	LockedAt time.Time
}

// IdempotencyBeginParams describe the request taking a key.
type IdempotencyBeginParams struct {
	Principal   string
	Key         string
	Fingerprint string
	Now         time.Time
	// ExpiresAt is when a record made now expires.
	ExpiresAt time.Time
	// StaleAfter is how old a running request's lock must be before another
	// request may take the key over (the first one crashed).
	StaleAfter time.Duration
}

// IdempotencyBeginResult is the record as it stands after the call.
type IdempotencyBeginResult struct {
	// Taken reports that this request holds the key and must run.
	Taken  bool
	Record twicetype.IdempotencyRecord
}

// IdempotencyExtendParams name the lock to refresh.
type IdempotencyExtendParams struct {
	Principal string
	Key       string
	// LockedAt is the caller's current lock: Begin's Record.LockedAt, or
	// the LockedAt of its last Extend. Required.
	LockedAt time.Time
	// Now is the lock's new time; zero means the store's clock. The new
	// lock is always later than LockedAt (by a microsecond when Now is
	// not), so each Extend gives the holder a new identity.
	Now time.Time
}

// IdempotencyExtendResult is the refreshed lock.
type IdempotencyExtendResult struct {
	// LockedAt is the new lock, in UTC at microsecond precision: pass it
	// to the next Extend and to Complete or Release.
	LockedAt time.Time
}

// IdempotencyCompleteParams carry the response to store.
type IdempotencyCompleteParams struct {
	Principal string
	Key       string
	// LockedAt, when set, is the lock the caller holds: the response is
	// stored only while that lock still holds the key, else the call fails
	// with ErrNotFound (see IdempotencyKeyParams.LockedAt).
	LockedAt time.Time
	Status   int
	Header   map[string][]string
	Body     []byte
}

// IdempotencyPruneParams select expired records.
type IdempotencyPruneParams struct {
	Before time.Time
	Limit  int
	// From carries a pass of batches on from the batch before, as
	// MarkerPruneParams.From does: a batch looks at no record that
	// expired before it. Zero starts at the earliest.
	From time.Time
}

// IdempotencyPruneResult counts the records deleted.
type IdempotencyPruneResult struct {
	Deleted int
	// From is the From of the next batch of the same pass: the latest
	// expiry among the records deleted so far in it.
	From time.Time
}
