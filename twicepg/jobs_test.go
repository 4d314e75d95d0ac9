package twicepg

import (
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/twicejobs/twice/internal/testkit/waitfor"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// waitBlockedBy returns once some backend waits for a lock held by the
// backend pid, or fails the test.
func waitBlockedBy(t *testing.T, s *Store, pid uint32) {
	t.Helper()
	waitfor.Cond(t, fmt.Sprintf("a backend to wait for a lock held by backend %d", pid), func() bool {
		var blocked bool
		if err := s.pool.QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE $1::integer = ANY(pg_blocking_pids(pid)))`, int32(pid)).Scan(&blocked); err != nil {
			t.Fatal(err)
		}
		return blocked
	}, nil)
}

func uniqueJob(kind, key string) *twicestore.JobInsertParams {
	return &twicestore.JobInsertParams{Kind: kind, Queue: "default", UniqueKey: key, MaxAttempts: 3, Args: []byte(`{}`)}
}

// TestInsertUniqueRace has two nodes insert the same unique job at once. The
// second one's statement waits for the first's transaction; when that
// commits, the conflicting row is too new for the waiting statement's
// snapshot, so JobInsertMany must look again to report the duplicate. When
// it rolls back, the second insert goes in.
func TestInsertUniqueRace(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, connString := openStore(t)
	other := openAt(t, connString)
	const kind = "test.race.v1"

	for _, commit := range []bool{true, false} {
		key := "tick"
		if !commit {
			key = "tick-rolled-back"
		}
		tx, err := s.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		first, err := tx.JobInsertMany(ctx, &twicestore.JobInsertManyParams{Jobs: []*twicestore.JobInsertParams{uniqueJob(kind, key)}})
		if err != nil {
			t.Fatal(err)
		}
		var pid uint32
		if err := tx.Unwrap().(pgx.Tx).QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
			t.Fatal(err)
		}

		type result struct {
			res *twicestore.JobInsertManyResult
			err error
		}
		second := make(chan result, 1)
		go func() {
			res, err := other.JobInsertMany(ctx, &twicestore.JobInsertManyParams{Jobs: []*twicestore.JobInsertParams{
				uniqueJob(kind, key), uniqueJob(kind, "other-"+key),
			}})
			second <- result{res, err}
		}()
		waitBlockedBy(t, s, pid)
		end := tx.Rollback
		if commit {
			end = tx.Commit
		}
		if err := end(ctx); err != nil {
			t.Fatal(err)
		}
		r := waitfor.Recv(t, second, "the waiting insert to return")
		if r.err != nil {
			t.Fatalf("commit %v: the waiting insert failed: %v", commit, r.err)
		}
		got := r.res.Jobs
		if got[1].Duplicate || got[1].Job.UniqueKey != "other-"+key {
			t.Errorf("commit %v: the other job's result is %+v", commit, got[1])
		}
		switch {
		case commit && (!got[0].Duplicate || got[0].Job.ID != first.Jobs[0].Job.ID):
			t.Errorf("after the first committed: Duplicate %v, job %d; want a duplicate of job %d",
				got[0].Duplicate, got[0].Job.ID, first.Jobs[0].Job.ID)
		case !commit && (got[0].Duplicate || got[0].Job.State != twicetype.JobStateAvailable):
			t.Errorf("after the first rolled back: Duplicate %v, state %s; want a new job", got[0].Duplicate, got[0].Job.State)
		}
	}
}

// TestInsertUniqueKeysInOrder: a batch takes its unique keys in sorted
// order whatever order it lists them in, so two nodes enqueuing the same
// unique jobs (the same recurring ticks) wait for each other instead of
// deadlocking. Here a batch listing b before a waits for a, held by another
// transaction, before it has taken b: a third transaction takes b at once.
func TestInsertUniqueKeysInOrder(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, connString := openStore(t)
	other := openAt(t, connString)
	const kind = "test.keyorder.v1"

	holder, err := s.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(ctx)
	held, err := holder.JobInsertMany(ctx, &twicestore.JobInsertManyParams{Jobs: []*twicestore.JobInsertParams{uniqueJob(kind, "a")}})
	if err != nil {
		t.Fatal(err)
	}
	var pid uint32
	if err := holder.Unwrap().(pgx.Tx).QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	type result struct {
		res *twicestore.JobInsertManyResult
		err error
	}
	inserted := make(chan result, 1)
	go func() {
		res, err := other.JobInsertMany(ctx, &twicestore.JobInsertManyParams{Jobs: []*twicestore.JobInsertParams{
			uniqueJob(kind, "b"), uniqueJob(kind, "a"),
		}})
		inserted <- result{res, err}
	}()
	waitBlockedBy(t, s, pid)

	// Had the waiting batch taken b already, this would wait for it.
	probe, err := s.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Rollback(ctx)
	if _, err := probe.Unwrap().(pgx.Tx).Exec(ctx, `SET LOCAL lock_timeout = '5s'`); err != nil {
		t.Fatal(err)
	}
	if _, err := probe.JobInsertMany(ctx, &twicestore.JobInsertManyParams{Jobs: []*twicestore.JobInsertParams{uniqueJob(kind, "b")}}); err != nil {
		t.Fatalf("key b is taken while the batch waits for key a: %v", err)
	}
	if err := probe.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := holder.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := waitfor.Recv(t, inserted, "the batch insert to return")
	if r.err != nil {
		t.Fatal(r.err)
	}
	if got := r.res.Jobs; got[0].Duplicate || !got[1].Duplicate || got[1].Job.ID != held.Jobs[0].Job.ID {
		t.Errorf("results %+v, %+v; want b inserted and a a duplicate of job %d", got[0], got[1], held.Jobs[0].Job.ID)
	}
}
