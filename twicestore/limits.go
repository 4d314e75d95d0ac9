package twicestore

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Flow control: limits that hold across every node because the store
// enforces them in JobFetch itself, in the transaction that leases the
// jobs. Usage is derived from the jobs' own rows (a slot is a running job),
// never counted in a side table, so a crashed node cannot leak a slot: its
// jobs stop being running when they are rescued, and the slot is free.

// KindLimit is the flow control of one kind, as its registration states
// it. The zero value limits nothing.
type KindLimit struct {
	// Global is the most jobs of the kind running at once across all
	// nodes; zero is no limit.
	Global int
	// PerKey is the most jobs of one concurrency key (JobInsertParams.
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

// MaxConcurrencyKeyBytes caps JobInsertParams.ConcurrencyKey: the key is
// stored with every job and indexed, so it is an identifier (a tenant, a
// customer), never a payload.
const MaxConcurrencyKeyBytes = 255

// ErrConcurrencyKeyTooLong is returned by a driver for a concurrency key
// over MaxConcurrencyKeyBytes (the root package refuses it earlier, with
// the kind named).
var ErrConcurrencyKeyTooLong = errors.New("twicestore: concurrency key too long")

// LimitListParams name the limited kinds to report on and when.
type LimitListParams struct {
	// Limits are the kinds' limits, as the caller's registry states them:
	// the store keeps no limits, only the usage they bound.
	Limits map[string]KindLimit
	// Now is when due jobs and rate windows are judged; zero is the
	// current time.
	Now time.Time
}

// LimitUsage is the state of one limited kind.
type LimitUsage struct {
	Kind  string
	Limit KindLimit
	// Running counts the kind's running jobs: the global slots in use.
	Running int
	// Due counts the kind's available jobs due at Now.
	Due int
	// Throttled counts the due jobs a limit holds back now: those the
	// fetch would not lease at Now however many workers were free (their
	// key's slots are taken or an earlier job of their key is unfinished,
	// the kind's slots or rate are used up). They wait for a slot; they are
	// neither orphaned nor stuck.
	Throttled int
	// Keys counts the distinct concurrency keys of unfinished jobs, and
	// BusyKeys those with a running job, when the kind has a per-key limit
	// or rate.
	Keys, BusyKeys int
	// RateUsed counts the starts in the kind's rate window ending at Now
	// (zero without a rate limit).
	RateUsed int
}

// LimitListResult holds one usage per kind of LimitListParams.Limits, by
// kind.
type LimitListResult struct {
	Kinds []LimitUsage
}

// LimitedKinds splits the fetch's kinds into those Limits limits, sorted
// (the order drivers take their locks in, so two fetches never wait for
// each other in a cycle), and the others, in their given order. A fetch
// whose limited list is empty takes the driver's plain path, unchanged.
func (p *JobFetchParams) LimitedKinds() (limited, plain []string) {
	if len(p.Limits) == 0 {
		return nil, p.Kinds
	}
	for _, k := range p.Kinds {
		if l, ok := p.Limits[k]; ok && !l.IsZero() {
			limited = append(limited, k)
		} else {
			plain = append(plain, k)
		}
	}
	slices.Sort(limited)
	limited = slices.Compact(limited)
	return limited, plain
}
