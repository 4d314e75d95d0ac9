package driverkit

import (
	"math/rand/v2"
	"time"

	"github.com/twicejobs/twice/twicestore"
)

// RateStartsKept is how long past a rate window's length its recorded
// starts are kept before a fetch prunes them. A fetch reads its Now before
// it waits for the kinds' locks (or the write lock), so it can hold an
// older Now than the fetch that went just before it; had that fetch
// pruned the starts exactly one window behind its own Now, the older
// window would miss some and let too many jobs start. Keeping the starts a
// while longer makes every Now less than RateStartsKept stale count right;
// the counts read only the window's own range, so the kept rows cost
// nothing but their space.
const RateStartsKept = time.Minute

// RatePruneOneIn is how rarely a rate-limited fetch prunes the starts
// past RateStartsKept: one fetch in RatePruneOneIn, at random. The counts
// read only their window's range of the index, so old starts cost only
// space, while the prune walks every start the kind keeps (a minute's
// worth: 30,000 rows at 500 a second); pruned at every fetch it held a
// 500/s limit on SQLite to a third of its rate.
const RatePruneOneIn = 32

// PruneRateStarts tells a driver whether this fetch prunes its kinds'
// rate windows (see RatePruneOneIn).
func PruneRateStarts() bool { return rand.IntN(RatePruneOneIn) == 0 }

// Throttled is how many of a kind's due jobs its limits hold back, given
// its running jobs, the starts in its rate window, its due jobs and how
// many of those its key rules (per-key limit, per-key rate) would let
// start: the eligible ones beyond the kind's room wait too. Drivers share
// it so LimitList means the same on each.
func Throttled(l twicestore.KindLimit, running, rateUsed, due, eligible int) int {
	room := eligible
	if l.Global > 0 {
		room = min(room, l.Global-running)
	}
	if l.Rate.Limit > 0 {
		room = min(room, l.Rate.Limit-rateUsed)
	}
	return due - max(room, 0)
}

// SettleUsage completes a kind's usage as both drivers read it: a kind
// with no rate limit reports no rate used, and Throttled counts the due
// jobs its limits hold back, given how many its key rules let start
// (eligible).
func SettleUsage(u *twicestore.LimitUsage, eligible int) {
	if u.Limit.Rate.Limit == 0 {
		u.RateUsed = 0
	}
	u.Throttled = Throttled(u.Limit, u.Running, u.RateUsed, u.Due, eligible)
}
