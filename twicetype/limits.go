package twicetype

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// KindLimit is the flow control of one kind, as its registration states
// it. The zero value limits nothing.
type KindLimit struct {
	// Global is the most jobs of the kind running at once across all
	// nodes; zero is no limit.
	Global int
	// PerKey is the most jobs of one concurrency key (twicestore.JobInsertParams.
	// ConcurrencyKey) running at once; zero is no limit. Jobs of a key
	// start in enqueue order (by id): a job starts only while fewer than
	// PerKey jobs of its key are running or were enqueued before it and
	// have not finished. With PerKey 1 the kind is sequential by key: a
	// later job never starts before an earlier one finished, retries
	// included (an earlier job waiting for its retry holds the later ones
	// back, unless KeyOrderSkipsRetries). Jobs with no key are not limited
	// by key.
	PerKey int
	// KeyOrderSkipsRetries takes the jobs waiting for a retry out of the
	// per-key order: an earlier job of the key that has run before (it
	// was leased: a retry after an error, a snooze) and is not due yet no
	// longer holds back the later jobs of its key, which may start before
	// it. Once due it is back in line at its place (its id). The per-key
	// limit still holds: running jobs always count. Needs PerKey.
	KeyOrderSkipsRetries bool
	// Rate bounds how many jobs of the kind start per period, across all
	// nodes; the zero value is no limit.
	Rate RateLimit
	// KeyRate bounds how many jobs of one concurrency key start per
	// period; the zero value is no limit. Jobs with no key are not limited
	// by it.
	KeyRate RateLimit
}

// RateLimit allows at most Limit job starts in any window of length
// Period.
//
// Algorithm: a sliding-window log. Each fetch that leases a rate-limited
// job records its start in the store, in the same transaction, and a
// fetch leases at most Limit minus the starts recorded in the window of
// length Period that ends at its clock; records older than the longest
// period are pruned by the same fetch. The fetches of a limited kind are
// serialised (a per-kind lock on PostgreSQL, the single writer on SQLite),
// and both clocks, the window's and the starts', are read while the fetch
// holds it, so there is no burst beyond Limit. On PostgreSQL the window's
// clock is read before the jobs are leased and the starts are stamped
// once the statement that leased them has ended, both on the database's
// clock (one clock for every node, whatever their skew): no window of
// length Period holds more than Limit moments at which jobs turned
// running, as the database saw them. On SQLite both are the host's clock
// (one file, one host) read under the write lock before the lease: no
// window holds more than Limit recorded starts, and the moments the jobs
// turned running follow them by the lease statement's run time. A Now
// ahead of the clock (a test's fixed clock) stands. The fetch cadence
// bounds the rate reached: a window that frees at t is used by the first
// fetch after t, so the measured rate is below Limit/Period by the share
// of the poll interval spent waiting. A start is the lease: a rescued or
// retried job starts again and counts again.
type RateLimit struct {
	Limit  int
	Period time.Duration
}

// IsZero reports whether r limits nothing.
func (r RateLimit) IsZero() bool { return r.Limit == 0 && r.Period == 0 }

// PeriodText is r's period the way people write it: "1h" and "5m", not
// Go's "1h0m0s" and "5m0s".
func (r RateLimit) PeriodText() string {
	s := r.Period.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// MinRatePeriod is the shortest RateLimit.Period: the stores keep times to
// the microsecond, and a shorter period would be a limit nobody could
// observe.
const MinRatePeriod = time.Millisecond

// IsZero reports whether l limits nothing.
func (l KindLimit) IsZero() bool {
	return l.Global == 0 && l.PerKey == 0 && !l.KeyOrderSkipsRetries && l.Rate.IsZero() && l.KeyRate.IsZero()
}

// Phrases puts l in words, one phrase a limit, in this order: "global
// 10", "per key 1", "retries out of key order", "rate 100/1s", "key rate
// 5/1m"; none for the zero value. The CLI and the dashboard both join
// them, so a kind's limits read the same wherever they are shown.
func (l KindLimit) Phrases() []string {
	var parts []string
	if l.Global > 0 {
		parts = append(parts, fmt.Sprintf("global %d", l.Global))
	}
	if l.PerKey > 0 {
		parts = append(parts, fmt.Sprintf("per key %d", l.PerKey))
	}
	if l.KeyOrderSkipsRetries {
		parts = append(parts, "retries out of key order")
	}
	if !l.Rate.IsZero() {
		parts = append(parts, fmt.Sprintf("rate %d/%s", l.Rate.Limit, l.Rate.PeriodText()))
	}
	if !l.KeyRate.IsZero() {
		parts = append(parts, fmt.Sprintf("key rate %d/%s", l.KeyRate.Limit, l.KeyRate.PeriodText()))
	}
	return parts
}

// Validate refuses limits no store can enforce: a negative limit, a rate
// with no period or one under MinRatePeriod, a rate period with no limit.
// The error does not name the kind; callers add it.
func (l KindLimit) Validate() error {
	switch {
	case l.Global < 0:
		return fmt.Errorf("global concurrency %d is negative: use a positive number, or 0 for no limit", l.Global)
	case l.PerKey < 0:
		return fmt.Errorf("per-key concurrency %d is negative: use a positive number, or 0 for no limit", l.PerKey)
	case l.KeyOrderSkipsRetries && l.PerKey == 0:
		return errors.New("retries skip the per-key order, but there is no per-key concurrency limit: set one, or drop the option")
	}
	if err := l.Rate.validate("rate limit"); err != nil {
		return err
	}
	return l.KeyRate.validate("per-key rate limit")
}

func (r RateLimit) validate(what string) error {
	switch {
	case r.IsZero():
		return nil
	case r.Limit <= 0:
		return fmt.Errorf("%s of %d per %s: the limit must be positive", what, r.Limit, r.Period)
	case r.Period < MinRatePeriod:
		return fmt.Errorf("%s of %d per %s: the period must be at least %s", what, r.Limit, r.Period, MinRatePeriod)
	}
	return nil
}
