package twicepg

import (
	"slices"
	"testing"
	"time"

	"github.com/twicejobs/twice/twicestore"
)

// floorTest is a store whose fetches use floors however fast they are,
// with a queue of its own.
type floorTest struct {
	t     *testing.T
	s     *Store
	base  time.Time // run_at of the first job inserted; the others follow a millisecond apart
	added int
}

func newFloorTest(t *testing.T) *floorTest {
	s, _ := openStore(t)
	s.floors.slowScan = 0
	return &floorTest{t: t, s: s, base: time.Now().Add(-time.Hour).Truncate(time.Millisecond)}
}

// insert enqueues n jobs of priority through the store, each due a
// millisecond after the one before, and returns their ids.
func (f *floorTest) insert(priority, n int) []int64 {
	f.t.Helper()
	ps := make([]*twicestore.JobInsertParams, n)
	for i := range ps {
		ps[i] = &twicestore.JobInsertParams{Kind: "floor.v1", Queue: "floors", Priority: priority, Args: []byte(`{}`),
			MaxAttempts: 3, RunAt: f.base.Add(time.Duration(f.added) * time.Millisecond)}
		f.added++
	}
	res, err := f.s.JobInsertMany(f.t.Context(), &twicestore.JobInsertManyParams{Jobs: ps})
	if err != nil {
		f.t.Fatal(err)
	}
	ids := make([]int64, n)
	for i, r := range res.Jobs {
		ids[i] = r.Job.ID
	}
	return ids
}

// insertElsewhere enqueues a job as another process would, with a plain
// INSERT the store does not see, and returns its id.
func (f *floorTest) insertElsewhere(priority int, runAt time.Time) int64 {
	f.t.Helper()
	var id int64
	err := f.s.pool.QueryRow(f.t.Context(), `INSERT INTO twice_jobs (kind, queue, priority, args, max_attempts, run_at, created_at)
		VALUES ('floor.v1', 'floors', $1, '{}', 3, $2, now()) RETURNING id`, priority, runAt).Scan(&id)
	if err != nil {
		f.t.Fatal(err)
	}
	return id
}

// fetch leases up to limit jobs and returns their ids in the fetch order,
// and whether the fetch was floored.
func (f *floorTest) fetch(limit int) (ids []int64, floored bool) {
	f.t.Helper()
	before := f.s.floors.floored.Load()
	res, err := f.s.JobFetch(f.t.Context(), &twicestore.JobFetchParams{Queue: "floors", Kinds: []string{"floor.v1"},
		Limit: limit, Node: "n", LeaseUntil: time.Now().Add(time.Minute)})
	if err != nil {
		f.t.Fatal(err)
	}
	for _, j := range res.Jobs {
		ids = append(ids, j.ID)
	}
	return ids, f.s.floors.floored.Load() > before
}

func (f *floorTest) wantFetch(limit int, want []int64, wantFloored bool) {
	f.t.Helper()
	got, floored := f.fetch(limit)
	if !slices.Equal(got, want) {
		f.t.Errorf("fetch %d: leased %v, want %v", limit, got, want)
	}
	if floored != wantFloored {
		f.t.Errorf("fetch %d: floored %v, want %v", limit, floored, wantFloored)
	}
}

// TestFetchFloorKeepsTheOrder: a fetch after one that filled its limit
// starts at the floor and leases what a full scan would have.
func TestFetchFloorKeepsTheOrder(t *testing.T) {
	t.Parallel()
	f := newFloorTest(t)
	ids := f.insert(1, 7)
	f.wantFetch(3, ids[:3], false)
	f.wantFetch(3, ids[3:6], true)
	f.wantFetch(3, ids[6:], true) // fewer than asked: the queue drained
	f.wantFetch(3, nil, false)    // so the next scan starts at the front
	more := f.insert(1, 2)
	f.wantFetch(1, more[:1], false) // a floor is kept for one queue and set of kinds only
	res, err := f.s.JobFetch(t.Context(), &twicestore.JobFetchParams{Queue: "floors", Kinds: []string{"floor.v1", "other.v1"},
		Limit: 1, Node: "n", LeaseUntil: time.Now().Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Jobs) != 1 || res.Jobs[0].ID != more[1] {
		t.Errorf("fetch with other kinds: leased %v, want job %d", res.Jobs, more[1])
	}
}

// TestFetchFloorUrgentJob: a job of a higher priority than the floor's,
// enqueued by another process, is leased by the very next fetch.
func TestFetchFloorUrgentJob(t *testing.T) {
	t.Parallel()
	f := newFloorTest(t)
	ids := f.insert(1, 6)
	f.wantFetch(2, ids[:2], false)
	urgent := f.insertElsewhere(0, time.Now())
	f.wantFetch(2, []int64{urgent, ids[2]}, true)
}

// TestFetchFloorDroppedByStore: a job that sorts before the floor, made
// available through the same store, drops the floor.
func TestFetchFloorDroppedByStore(t *testing.T) {
	t.Parallel()
	f := newFloorTest(t)
	ids := f.insert(1, 6)
	f.wantFetch(2, ids[:2], false)
	f.base = f.base.Add(-time.Minute) // due before every job so far
	early := f.insert(1, 1)
	f.wantFetch(2, []int64{early[0], ids[2]}, false)
	f.wantFetch(2, ids[3:5], true)
	// A retry due before the floor drops it too.
	if _, err := f.s.JobFinish(t.Context(), &twicestore.JobFinishParams{Outcomes: []*twicestore.JobOutcome{{
		ID: ids[3], Epoch: 1, State: "available", RunAt: f.base}}}); err != nil {
		t.Fatal(err)
	}
	f.wantFetch(1, []int64{ids[3]}, false)
}

// TestFetchFloorLateJobWaitsForAFullScan: a job of the floor's priority
// that another process makes available before the floor is not leased by
// a floored fetch, and is leased by the next full scan: when the queue
// drains, or when fullEvery has passed.
func TestFetchFloorLateJobWaitsForAFullScan(t *testing.T) {
	t.Parallel()
	f := newFloorTest(t)
	ids := f.insert(1, 6)
	f.wantFetch(2, ids[:2], false)
	late := f.insertElsewhere(1, f.base.Add(-time.Minute))
	f.wantFetch(2, ids[2:4], true)
	f.s.floors.mu.Lock()
	for _, fl := range f.s.floors.byQueue["floors"] {
		fl.lastFull = fl.lastFull.Add(-fl.fullEvery) // as if fullEvery had passed
	}
	f.s.floors.mu.Unlock()
	f.wantFetch(2, []int64{late, ids[4]}, false)
	f.wantFetch(2, ids[5:], true)
}

// TestFetchFloorNotUsedWhenFast: with the default threshold, a fetch on
// a small healthy table never uses a floor, so the order stays exact.
func TestFetchFloorNotUsedWhenFast(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t)
	f := &floorTest{t: t, s: s, base: time.Now().Add(-time.Hour)}
	ids := f.insert(1, 4)
	f.fetch(2)
	late := f.insertElsewhere(1, f.base.Add(-time.Minute))
	got, floored := f.fetch(2)
	if floored && !slices.Contains(got, late) {
		// Only a full scan that took floorSlowScan or longer sets a floor:
		// possible on a loaded machine, so this says so rather than fail.
		t.Skipf("the first fetch took %v or longer: the machine is too loaded for this check", floorSlowScan)
	}
	if want := []int64{late, ids[2]}; !slices.Equal(got, want) {
		t.Errorf("leased %v, want %v", got, want)
	}
}
