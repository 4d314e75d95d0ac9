package twicestore

import (
	"errors"
	"slices"
	"time"

	"github.com/twicejobs/twice/twicetype"
)

// Flow control: limits that hold across every node because the store
// enforces them in JobFetch itself, in the transaction that leases the
// jobs. Usage is derived from the jobs' own rows (a slot is a running job),
// never counted in a side table, so a crashed node cannot leak a slot: its
// jobs stop being running when they are rescued, and the slot is free.

// KindLimit is the flow control of one kind, as its registration states
// it (see twicetype.KindLimit, where it is declared so the kind catalog
// can carry it).
type KindLimit = twicetype.KindLimit

// RateLimit allows at most Limit job starts in any window of length
// Period (see twicetype.RateLimit for the algorithm every driver
// implements).
type RateLimit = twicetype.RateLimit

// MinRatePeriod is the shortest RateLimit.Period.
const MinRatePeriod = twicetype.MinRatePeriod

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
	Kind string
	// Limit is the kind's limits in force: the override's when one is
	// set, else the compiled ones.
	Limit KindLimit
	// Compiled is the kind's limits as registered (KindOpts), by the
	// caller's registry or the kind catalog; the drivers leave it zero.
	Compiled KindLimit
	// Override is the runtime override in force, nil when none is set;
	// the drivers leave it nil.
	Override *twicetype.LimitOverride
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
