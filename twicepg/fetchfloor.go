package twicepg

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twicejobs/twice/twicetype"
)

// Fetch floors keep the fetch fast while something pins the xmin horizon.
//
// The fetch reads twice_jobs_fetch, a partial index of the available
// jobs, in (queue, priority, run_at, id) order. A job that is leased
// leaves a dead entry at the front of that range. Normally the next
// scan that meets the entry marks it dead in the index, and vacuum later
// removes it. A long-running reader or a session idle in transaction
// stops both: the entry is "recently dead" for as long as the snapshot
// lives. Every fetch then walks every entry leased since the snapshot
// began before it reaches an available job. With 100,000 such entries a
// fetch of 100 jobs took 42 ms instead of 0.5 ms (EXPLAIN ANALYZE,
// PostgreSQL 15).
//
// A floor is the sort key of the first job the last fetch leased. The
// jobs before it were leased, locked by another fetcher, of kinds this
// fetch does not take, or not due. A floored fetch starts its scan at the
// floor, so it skips the dead entries. Jobs of a higher priority (a
// lower number) are read by a second scan that starts at the front of
// the queue, so an urgent job never waits behind a floor.
//
// What a floor can miss until the next full scan is a job of the floor's
// own priority that sorts before it and became available after the floor
// was taken, for example:
//   - a job enqueued with an earlier run_at by another process;
//   - a job rescued, retried or released by another process;
//   - a job that was locked when the floor was taken, and stayed
//     available.
//
// Such a job waits at most fullEvery, and only under the conditions
// below. Writes through this Store that can make such a job available
// drop the floors at once (see lowered, loweredAt and dropAll).
//
// A floor is used only when all of these hold:
//   - the last full scan of the same queue and kinds took floorSlowScan
//     or longer (on a healthy table it takes about a millisecond, and
//     the order stays exact);
//   - the last fetch filled its limit (a drained queue is scanned from
//     the front);
//   - the last full scan is more recent than fullEvery: twenty times its
//     duration, at least floorFullEveryMin, at most floorFullEveryMax.
//
// So the full scans take at most a twentieth of the fetching loop's time
// (which waits for each) while one takes up to 250 ms; a slower one runs
// every 5 s.
const (
	floorSlowScan     = 20 * time.Millisecond
	floorFullEveryMin = 100 * time.Millisecond
	floorFullEveryMax = 5 * time.Second
	// floorKeysMax bounds the floors kept. A process fetches a handful of
	// queue-and-kinds sets; past this many, every floor is dropped.
	floorKeysMax = 1024
)

// fetchFloors holds the floors of one Store, per queue and per set of
// kinds fetched. Its methods are safe for concurrent use; a nil
// *fetchFloors keeps no floors and always scans in full.
type fetchFloors struct {
	mu sync.Mutex
	// byQueue maps a queue to its floors, by kinds key (see kindsKey).
	byQueue map[string]map[string]*fetchFloor
	n       int // floors in byQueue
	// slowScan is floorSlowScan; tests set it to zero to use floors on
	// a small table.
	slowScan time.Duration
	// floored counts the floored fetches, for tests.
	floored atomic.Int64
}

// fetchFloor is the state of one queue and set of kinds.
type fetchFloor struct {
	// set tells whether key may be used: the last fetch filled its limit
	// and nothing through this Store made a job available before key
	// since.
	set bool
	key jobSortKey
	// lastFull is when the last full scan began, and fullEvery how often
	// one runs while floors are in use.
	lastFull  time.Time
	fullEvery time.Duration
	// slow tells whether the last full scan took floorSlowScan or longer.
	slow bool
}

// jobSortKey is where a job sorts in the fetch order.
type jobSortKey struct {
	priority int
	runAt    time.Time
	id       int64
}

func newFetchFloors() *fetchFloors {
	return &fetchFloors{byQueue: map[string]map[string]*fetchFloor{}, slowScan: floorSlowScan}
}

// kindsKey names a set of kinds whatever their order.
func kindsKey(kinds []string) string {
	if slices.IsSorted(kinds) {
		return strings.Join(kinds, "\x00")
	}
	sorted := slices.Clone(kinds)
	slices.Sort(sorted)
	return strings.Join(sorted, "\x00")
}

// floorFor returns the floor a fetch of queue and kinds starting at now
// should scan from, and whether it should use one.
func (f *fetchFloors) floorFor(queue, kinds string, now time.Time) (jobSortKey, bool) {
	if f == nil {
		return jobSortKey{}, false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	fl := f.byQueue[queue][kinds]
	if fl == nil || !fl.set || !fl.slow || now.Sub(fl.lastFull) >= fl.fullEvery {
		return jobSortKey{}, false
	}
	f.floored.Add(1)
	return fl.key, true
}

// fetched records a fetch of queue and kinds that began at start, took
// elapsed, was floored or not, asked for limit jobs and leased first
// (the first of them in the fetch order) and n in all.
func (f *fetchFloors) fetched(queue, kinds string, start time.Time, elapsed time.Duration, floored bool,
	limit, n int, first *twicetype.JobRow) {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	fl := f.byQueue[queue][kinds]
	if fl == nil {
		if f.n >= floorKeysMax {
			clear(f.byQueue)
			f.n = 0
		}
		if f.byQueue[queue] == nil {
			f.byQueue[queue] = map[string]*fetchFloor{}
		}
		fl = &fetchFloor{}
		f.byQueue[queue][kinds] = fl
		f.n++
	}
	if !floored {
		fl.lastFull = start
		fl.slow = elapsed >= f.slowScan
		fl.fullEvery = min(max(20*elapsed, floorFullEveryMin), floorFullEveryMax)
	}
	if n < limit || first == nil {
		fl.set = false
		return
	}
	fl.set, fl.key = true, jobSortKey{priority: first.Priority, runAt: first.RunAt, id: first.ID}
}

// lowered drops the floors of queue that a job of priority due at runAt,
// just made available through this Store with an id above every earlier
// one, would sort before.
func (f *fetchFloors) lowered(queue string, priority int, runAt time.Time) {
	f.dropIf(func(q string) bool { return q == queue }, func(k jobSortKey) bool {
		return priority < k.priority || priority == k.priority && runAt.Before(k.runAt)
	})
}

// loweredAt drops the floors, of any queue, that a job due at runAt
// would sort before were its priority the floor's: a job of unknown queue
// and priority (a retry or a snooze through this Store) made available.
func (f *fetchFloors) loweredAt(runAt time.Time) {
	f.dropIf(anyQueue, func(k jobSortKey) bool { return runAt.Before(k.runAt) })
}

// dropAll drops every floor: a write through this Store made jobs
// available whose place in the order it does not know.
func (f *fetchFloors) dropAll() {
	f.dropIf(anyQueue, func(jobSortKey) bool { return true })
}

func anyQueue(string) bool { return true }

// dropIf drops the floors of the queues inQueue names whose key after
// says a job now sorts before.
func (f *fetchFloors) dropIf(inQueue func(queue string) bool, after func(floor jobSortKey) bool) {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for queue, floors := range f.byQueue {
		if !inQueue(queue) {
			continue
		}
		for _, fl := range floors {
			if fl.set && after(fl.key) {
				fl.set = false
			}
		}
	}
}
