package twicepg

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/twicejobs/twice/internal/testkit/waitfor"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// TestScheduleTickRace has two nodes record the same tick at once, the first
// inside a transaction it has not ended. The second waits on the schedule's
// row, whether the first inserted it (the schedule's first tick) or updated
// it (a later tick). When the first commits, the second does not fire; when
// it rolls back, the second takes the tick and enqueues its own job.
func TestScheduleTickRace(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, connString := openStore(t)
	other := openAt(t, connString)
	base := time.Date(2031, 3, 4, 5, 6, 0, 0, time.UTC)
	tick := func(name string, at time.Time) *twicestore.ScheduleTickParams {
		return &twicestore.ScheduleTickParams{
			Name: name, Kind: "test.tick.v1", Spec: "@every 1m", TickAt: at, NextAt: at.Add(time.Minute),
			Outcome: twicetype.ScheduleEnqueued, Job: uniqueJob("test.tick.v1", ""), Now: at,
		}
	}

	for _, tc := range []struct {
		existing, commit bool
	}{{false, true}, {false, false}, {true, true}, {true, false}} {
		name := fmt.Sprintf("existing=%t,commit=%t", tc.existing, tc.commit)
		at := base
		if tc.existing {
			if _, err := s.ScheduleTick(ctx, tick(name, base)); err != nil {
				t.Fatal(err)
			}
			at = base.Add(time.Minute)
		}
		tx, err := s.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx) // after Commit, a no-op error
		first, err := tx.ScheduleTick(ctx, tick(name, at))
		if err != nil {
			t.Fatal(err)
		}
		if !first.Fired {
			t.Fatalf("%s: the first tick did not fire", name)
		}
		var pid uint32
		if err := tx.Unwrap().(pgx.Tx).QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
			t.Fatal(err)
		}

		type result struct {
			res *twicestore.ScheduleTickResult
			err error
		}
		second := make(chan result, 1)
		go func() {
			res, err := other.ScheduleTick(ctx, tick(name, at))
			second <- result{res, err}
		}()
		waitBlockedBy(t, s, pid)
		end := tx.Rollback
		if tc.commit {
			end = tx.Commit
		}
		if err := end(ctx); err != nil {
			t.Fatal(err)
		}
		r := waitfor.Recv(t, second, "the waiting tick to return")
		if r.err != nil {
			t.Fatalf("%s: the waiting tick failed: %v", name, r.err)
		}
		want := first.Job.ID
		if tc.commit {
			if r.res.Fired || r.res.Job != nil {
				t.Errorf("%s: the waiting tick fired (job %+v) after the first committed", name, r.res.Job)
			}
		} else {
			if !r.res.Fired || r.res.Job == nil || r.res.Job.ID == first.Job.ID {
				t.Fatalf("%s: the waiting tick returned %+v after the first rolled back; want it fired with a new job", name, r.res)
			}
			want = r.res.Job.ID
		}
		list, err := s.ScheduleList(ctx, &twicestore.ScheduleListParams{})
		if err != nil {
			t.Fatal(err)
		}
		var got *twicetype.Schedule
		for i := range list.Schedules {
			if list.Schedules[i].Name == name {
				got = &list.Schedules[i]
			}
		}
		if got == nil || !got.LastTickAt.Equal(at) || got.LastJobID != want {
			t.Errorf("%s: schedule %+v; want the tick at %s with job %d", name, got, at, want)
		}
	}
}
