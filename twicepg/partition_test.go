package twicepg

import (
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicestore/storetest"
	"github.com/twicejobs/twice/twicetype"
)

func TestMigration023PartitionsKeepEveryJob(t *testing.T) {
	t.Parallel()
	storetest.HotPathUpgrade(t, func(t *testing.T, version int) storetest.OldRows {
		return openOldSchema(t, version).(oldSchema)
	}, 21)
}

// partitionOf returns the partition that holds job id.
func partitionOf(t *testing.T, conn *pgx.Conn, id int64) string {
	t.Helper()
	var part string
	if err := conn.QueryRow(t.Context(), `SELECT tableoid::regclass::text FROM twice_jobs WHERE id = $1`, id).Scan(&part); err != nil {
		t.Fatalf("partition of job %d: %v", id, err)
	}
	return part
}

// TestUpgradeSortsJobsIntoPartitions: the upgrade puts each job of a
// populated table in the partition of its state.
func TestUpgradeSortsJobsIntoPartitions(t *testing.T) {
	t.Parallel()
	old := openOldSchema(t, 21).(oldSchema)
	ids := map[twicetype.JobState]int64{}
	for _, st := range twicetype.AllJobStates {
		if st == twicetype.JobStateWaiting {
			continue // no twice before migration 025 parks a job
		}
		ids[st] = old.InsertJobAt(t, st, 5)
	}
	old.Upgrade(t)
	for st, id := range ids {
		want := "twice_jobs_done"
		if !st.Finished() {
			want = "twice_jobs_live_0"
		}
		if got := partitionOf(t, old.conn, id); got != want {
			t.Errorf("%s job %d is in %s, want %s", st, id, got, want)
		}
	}
}

// TestFinishMovesTheJobOut: a job finishes in the done partition, in the
// statement that finishes it, and a retry brings it back.
func TestFinishMovesTheJobOut(t *testing.T) {
	t.Parallel()
	s, connString := openStore(t)
	conn := connect(t, t.Context(), connString)
	ctx := t.Context()
	res, err := s.JobInsertMany(ctx, &twicestore.JobInsertManyParams{Jobs: []*twicestore.JobInsertParams{
		{Kind: "part.v1", Queue: "default", MaxAttempts: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	id := res.Jobs[0].Job.ID
	if got := partitionOf(t, conn, id); !strings.HasPrefix(got, "twice_jobs_live_") {
		t.Errorf("a new job is in %s, want a generation of twice_jobs_live", got)
	}
	now := time.Now()
	f, err := s.JobFetch(ctx, &twicestore.JobFetchParams{Queue: "default", Kinds: []string{"part.v1"}, Limit: 1,
		Node: "n", Now: now, LeaseUntil: now.Add(time.Minute)})
	if err != nil || len(f.Jobs) != 1 {
		t.Fatalf("fetch: %+v, %v", f, err)
	}
	if _, err := s.JobFinish(ctx, &twicestore.JobFinishParams{Outcomes: []*twicestore.JobOutcome{{ID: id,
		Epoch: f.Jobs[0].Epoch, State: twicetype.JobStateDead, FinishedAt: now}}}); err != nil {
		t.Fatal(err)
	}
	if got := partitionOf(t, conn, id); got != "twice_jobs_done" {
		t.Errorf("a dead job is in %s, want twice_jobs_done", got)
	}
	if _, err := s.JobRetry(ctx, &twicestore.JobBulkParams{Filter: twicestore.JobFilter{IDs: []int64{id}}}); err != nil {
		t.Fatal(err)
	}
	if got := partitionOf(t, conn, id); !strings.HasPrefix(got, "twice_jobs_live_") {
		t.Errorf("a retried job is in %s, want a generation of twice_jobs_live", got)
	}
}

// TestRetryThatWouldLoseAJobFails: an update that moves a dead unique job
// back to available while another job holds its key would lose the job
// (the claim trigger skips the move's insert); it fails instead, and the
// job stays dead. JobRetry never sends such an update unless a holder
// commits while it runs; this sends it directly.
func TestRetryThatWouldLoseAJobFails(t *testing.T) {
	t.Parallel()
	s, connString := openStore(t)
	conn := connect(t, t.Context(), connString)
	ctx := t.Context()
	insert := func() int64 {
		t.Helper()
		res, err := s.JobInsertMany(ctx, &twicestore.JobInsertManyParams{Jobs: []*twicestore.JobInsertParams{
			{Kind: "part.v1", Queue: "default", MaxAttempts: 1, UniqueKey: "k"}}})
		if err != nil || res.Jobs[0].Duplicate {
			t.Fatalf("insert: %+v, %v", res, err)
		}
		return res.Jobs[0].Job.ID
	}
	dead := insert()
	if _, err := conn.Exec(ctx, `UPDATE twice_jobs SET state = 'dead', finished_at = now() WHERE id = $1`, dead); err != nil {
		t.Fatal(err)
	}
	holder := insert()
	_, err := conn.Exec(ctx, `UPDATE twice_jobs SET state = 'available', finished_at = NULL WHERE id = $1`, dead)
	if !isUniqueViolation(err) {
		t.Errorf("moving job %d back while job %d holds its key: %v, want a unique violation", dead, holder, err)
	}
	j, err := s.JobGet(ctx, &twicestore.JobGetParams{ID: dead})
	if err != nil {
		t.Fatalf("job %d after the refused move: %v", dead, err)
	}
	if j.State != twicetype.JobStateDead {
		t.Errorf("job %d is %s after the refused move, want dead", dead, j.State)
	}
}
