package twicepg

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// idleGeneration returns the generation new jobs are not entering now.
func idleGeneration(t *testing.T, conn *pgx.Conn) int {
	t.Helper()
	var cur int
	if err := conn.QueryRow(t.Context(), `SELECT twice_jobs_gen()`).Scan(&cur); err != nil {
		t.Fatal(err)
	}
	return 1 - cur
}

// rotationJobs inserts n jobs of kind, leases half of them and completes
// a quarter, then moves those still waiting or running to the idle
// generation (a fetch moves the jobs it leases to the current one), so
// that it holds waiting and running jobs. It returns the idle generation.
func rotationJobs(t *testing.T, s *Store, conn *pgx.Conn, kind string, n int, uniqueKeys bool) int {
	t.Helper()
	ctx := t.Context()
	jobs := make([]*twicestore.JobInsertParams, n)
	for i := range jobs {
		jobs[i] = &twicestore.JobInsertParams{Kind: kind, Queue: "default", MaxAttempts: 3}
		if uniqueKeys {
			jobs[i].UniqueKey = fmt.Sprintf("k%d", i)
		}
	}
	if _, err := s.JobInsertMany(ctx, &twicestore.JobInsertManyParams{Jobs: jobs}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	f, err := s.JobFetch(ctx, &twicestore.JobFetchParams{Queue: "default", Kinds: []string{kind}, Limit: n / 2,
		Node: "n", Now: now, LeaseUntil: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	var outcomes []*twicestore.JobOutcome
	for _, j := range f.Jobs[:len(f.Jobs)/2] {
		outcomes = append(outcomes, &twicestore.JobOutcome{ID: j.ID, Epoch: j.Epoch, State: twicetype.JobStateCompleted, FinishedAt: now})
	}
	if _, err := s.JobFinish(ctx, &twicestore.JobFinishParams{Outcomes: outcomes}); err != nil {
		t.Fatal(err)
	}
	idle := idleGeneration(t, conn)
	if _, err := conn.Exec(ctx, `UPDATE twice_jobs SET gen = $1 WHERE kind = $2 AND state IN ('available', 'running')`,
		idle, kind); err != nil {
		t.Fatal(err)
	}
	return idle
}

// countIn counts the rows of generation g's partition, and its size.
func countIn(t *testing.T, conn *pgx.Conn, g int) (rows, bytes int64) {
	t.Helper()
	table := fmt.Sprintf("twice_jobs_live_%d", g)
	if err := conn.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM `+table+`), pg_relation_size($1::regclass)`,
		table).Scan(&rows, &bytes); err != nil {
		t.Fatal(err)
	}
	return rows, bytes
}

// jobStates returns each job's state, epoch and attempt, by id.
func jobStates(t *testing.T, conn *pgx.Conn) map[int64]string {
	t.Helper()
	rs, err := conn.Query(t.Context(), `SELECT id, format('%s/%s/%s', state, epoch, attempt) FROM twice_jobs`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int64]string{}
	var id int64
	var s string
	if _, err := pgx.ForEachRow(rs, []any{&id, &s}, func() error { out[id] = s; return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRotateEmptiesTheIdleGeneration: the idle generation's jobs move to
// the other one, each as it was, and the generation is truncated. When the
// 30 s period turns between the set-up and the call, the call empties the
// other (now idle) generation; the test then checks what holds either way.
func TestRotateEmptiesTheIdleGeneration(t *testing.T) {
	t.Parallel()
	s, connString := openStore(t)
	conn := connect(t, t.Context(), connString)
	idle := rotationJobs(t, s, conn, "rotate.v1", 40, false)
	before := jobStates(t, conn)
	res, err := s.JobRotate(t.Context(), &twicestore.JobRotateParams{Force: true})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Emptied {
		t.Fatalf("JobRotate(Force) = %+v, want the generation emptied", res)
	}
	if rows, bytes := countIn(t, conn, res.Generation); rows != 0 || bytes != 0 {
		t.Errorf("generation %d after JobRotate: %d rows, %d bytes, want none", res.Generation, rows, bytes)
	}
	if res.Generation == idle && res.Moved != 30 {
		t.Errorf("JobRotate moved %d jobs, want the 30 waiting or running", res.Moved)
	}
	after := jobStates(t, conn)
	if len(after) != len(before) {
		t.Errorf("%d jobs after JobRotate, want %d", len(after), len(before))
	}
	for id, st := range before {
		if after[id] != st {
			t.Errorf("job %d was %s before JobRotate and is %q after", id, st, after[id])
		}
	}
}

// TestRotateBesideAHeldSnapshot: a session holding a snapshot (here
// REPEATABLE READ, on a table of its own) keeps vacuum from removing the
// dead row versions, but not JobRotate.
func TestRotateBesideAHeldSnapshot(t *testing.T) {
	t.Parallel()
	s, connString := openStore(t)
	conn := connect(t, t.Context(), connString)
	pin := connect(t, t.Context(), connString)
	if _, err := pin.Exec(t.Context(), `CREATE TABLE report (n int); INSERT INTO report VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	tx, err := pin.BeginTx(t.Context(), pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(t.Context(), `SELECT count(*) FROM report`); err != nil {
		t.Fatal(err)
	}
	idle := rotationJobs(t, s, conn, "rotate.pinned.v1", 40, false)
	if _, err := conn.Exec(t.Context(), fmt.Sprintf(`VACUUM twice_jobs_live_%d`, idle)); err != nil {
		t.Fatal(err)
	}
	if _, bytes := countIn(t, conn, idle); bytes == 0 {
		t.Fatalf("generation %d is empty before JobRotate", idle)
	}
	res, err := s.JobRotate(t.Context(), &twicestore.JobRotateParams{Force: true})
	if err != nil || !res.Emptied {
		t.Fatalf("JobRotate(Force) beside a held snapshot = %+v, %v, want the generation emptied", res, err)
	}
	if rows, bytes := countIn(t, conn, res.Generation); rows != 0 || bytes != 0 {
		t.Errorf("generation %d after JobRotate: %d rows, %d bytes, want none", res.Generation, rows, bytes)
	}
}

// TestRotateLeavesAGenerationInUse: a transaction that read the idle
// generation holds it; JobRotate gives up on it quickly, without an
// error, and empties it once the transaction ends.
func TestRotateLeavesAGenerationInUse(t *testing.T) {
	t.Parallel()
	s, connString := openStore(t)
	conn := connect(t, t.Context(), connString)
	reader := connect(t, t.Context(), connString)
	idle := rotationJobs(t, s, conn, "rotate.inuse.v1", 20, false)
	tx, err := reader.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(t.Context(), fmt.Sprintf(`SELECT count(*) FROM twice_jobs_live_%d`, idle)); err != nil {
		t.Fatal(err)
	}
	res, err := s.JobRotate(t.Context(), &twicestore.JobRotateParams{Force: true})
	if err != nil {
		t.Fatalf("JobRotate beside a reader: %v", err)
	}
	if res.Generation == idle && res.Emptied {
		t.Errorf("JobRotate emptied generation %d while a transaction read it", idle)
	}
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	res, err = s.JobRotate(t.Context(), &twicestore.JobRotateParams{Force: true})
	if err != nil || !res.Emptied {
		t.Errorf("JobRotate after the reader ended = %+v, %v, want the generation emptied", res, err)
	}
}

// TestRotateKeepsUniqueKeys: a unique job that moves generation keeps its
// key (the move's insert finds its own claim).
func TestRotateKeepsUniqueKeys(t *testing.T) {
	t.Parallel()
	s, connString := openStore(t)
	conn := connect(t, t.Context(), connString)
	rotationJobs(t, s, conn, "rotate.unique.v1", 8, true)
	if _, err := s.JobRotate(t.Context(), &twicestore.JobRotateParams{Force: true}); err != nil {
		t.Fatal(err)
	}
	var held int
	if err := conn.QueryRow(t.Context(), `SELECT count(*) FROM twice_jobs
		WHERE kind = 'rotate.unique.v1' AND state IN ('available', 'running')`).Scan(&held); err != nil {
		t.Fatal(err)
	}
	jobs := make([]*twicestore.JobInsertParams, 8)
	for i := range jobs {
		jobs[i] = &twicestore.JobInsertParams{Kind: "rotate.unique.v1", Queue: "default", MaxAttempts: 3, UniqueKey: fmt.Sprintf("k%d", i)}
	}
	res, err := s.JobInsertMany(t.Context(), &twicestore.JobInsertManyParams{Jobs: jobs})
	if err != nil {
		t.Fatal(err)
	}
	dups := 0
	for _, r := range res.Jobs {
		if r.Duplicate {
			dups++
		}
	}
	if dups != held || held != 6 {
		t.Errorf("after the rotation, %d of 8 keys are duplicates, want the %d (of 6) still waiting or running", dups, held)
	}
}

// TestRotateMovesADueBacklog: due jobs are left for the fetch to move when
// they are few, and moved too when more than rotateMaxLeft wait in the idle
// generation (a backlog, a paused queue), so the generation is emptied
// either way.
func TestRotateMovesADueBacklog(t *testing.T) {
	t.Parallel()
	s, connString := openStore(t)
	conn := connect(t, t.Context(), connString)
	const n = rotateMaxLeft + 500
	jobs := make([]*twicestore.JobInsertParams, n)
	for i := range jobs {
		jobs[i] = &twicestore.JobInsertParams{Kind: "rotate.backlog.v1", Queue: "default", MaxAttempts: 3}
	}
	if _, err := s.JobInsertMany(t.Context(), &twicestore.JobInsertManyParams{Jobs: jobs}); err != nil {
		t.Fatal(err)
	}
	idle := idleGeneration(t, conn)
	if _, err := conn.Exec(t.Context(), `UPDATE twice_jobs SET gen = $1`, idle); err != nil {
		t.Fatal(err)
	}
	res, err := s.JobRotate(t.Context(), &twicestore.JobRotateParams{Force: true})
	if err != nil || !res.Emptied {
		t.Fatalf("JobRotate(Force) = %+v, %v, want the generation emptied", res, err)
	}
	if res.Generation == idle && res.Moved != n {
		t.Errorf("JobRotate moved %d jobs, want all %d", res.Moved, n)
	}
	var waiting int
	if err := conn.QueryRow(t.Context(), `SELECT count(*) FROM twice_jobs WHERE state = 'available'`).Scan(&waiting); err != nil {
		t.Fatal(err)
	}
	if waiting != n {
		t.Errorf("%d jobs wait after JobRotate, want %d", waiting, n)
	}
}

// TestFetchMovesLeasedJobs: a leased job enters the generation new jobs
// enter, so the rotation has no due job to move ahead of the fetch.
func TestFetchMovesLeasedJobs(t *testing.T) {
	t.Parallel()
	s, connString := openStore(t)
	conn := connect(t, t.Context(), connString)
	// A kind without limits takes the plain fetch; a kind with only a
	// global limit, the global one; a per-key limit, the limited one.
	for _, tc := range []struct {
		name  string
		limit twicestore.KindLimit
	}{
		{"plain", twicestore.KindLimit{}},
		{"global", twicestore.KindLimit{Global: 5}},
		{"limited", twicestore.KindLimit{Global: 5, PerKey: 1}},
	} {
		kind := "rotate.fetch." + tc.name + ".v1"
		jobs := []*twicestore.JobInsertParams{{Kind: kind, Queue: tc.name, MaxAttempts: 3, ConcurrencyKey: "k"}}
		if _, err := s.JobInsertMany(t.Context(), &twicestore.JobInsertManyParams{Jobs: jobs}); err != nil {
			t.Fatal(err)
		}
		idle := idleGeneration(t, conn)
		if _, err := conn.Exec(t.Context(), `UPDATE twice_jobs SET gen = $1 WHERE kind = $2`, idle, kind); err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		f, err := s.JobFetch(t.Context(), &twicestore.JobFetchParams{Queue: tc.name, Kinds: []string{kind},
			Limit: 1, Node: "n", Now: now, LeaseUntil: now.Add(time.Hour),
			Limits: map[string]twicestore.KindLimit{kind: tc.limit}})
		if err != nil || len(f.Jobs) != 1 {
			t.Fatalf("%s: JobFetch = %v, %v, want the job", tc.name, f, err)
		}
		var gen int
		if err := conn.QueryRow(t.Context(), `SELECT gen FROM twice_jobs WHERE id = $1`, f.Jobs[0].ID).Scan(&gen); err != nil {
			t.Fatal(err)
		}
		if gen == idle && idleGeneration(t, conn) == idle {
			t.Errorf("%s fetch: the leased job stayed in generation %d, which new jobs are not entering", tc.name, idle)
		}
	}
}

// TestAnalyzeCurrentGeneration: statistics that count far fewer jobs than
// the generation holds (it was never analysed) are refreshed, once.
func TestAnalyzeCurrentGeneration(t *testing.T) {
	t.Parallel()
	s, connString := openStore(t)
	conn := connect(t, t.Context(), connString)
	const n = 2 * analyzeMinLive
	jobs := make([]*twicestore.JobInsertParams, n)
	for i := range jobs {
		jobs[i] = &twicestore.JobInsertParams{Kind: "rotate.analyze.v1", Queue: "default", MaxAttempts: 3}
	}
	if _, err := s.JobInsertMany(t.Context(), &twicestore.JobInsertManyParams{Jobs: jobs}); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(t.Context(), `UPDATE twice_jobs SET gen = 0 WHERE gen <> 0`); err != nil {
		t.Fatal(err)
	}
	// The statistics collector counts the inserts when the session
	// reports them, at the end of its transaction, within a second.
	var live int64
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if err := conn.QueryRow(t.Context(), `SELECT n_live_tup FROM pg_stat_user_tables
			WHERE relid = 'twice_jobs_live_0'::regclass`).Scan(&live); err != nil {
			t.Fatal(err)
		}
		if live >= n {
			break
		}
	}
	analyzed, err := s.analyzeCurrent(t.Context(), 0)
	if err != nil || !analyzed {
		t.Fatalf("analyzeCurrent with %d live jobs and no statistics = %v, %v, want analysed", live, analyzed, err)
	}
	var counted float64
	if err := conn.QueryRow(t.Context(), `SELECT reltuples FROM pg_class WHERE oid = 'twice_jobs_live_0'::regclass`).Scan(&counted); err != nil {
		t.Fatal(err)
	}
	if counted != n {
		t.Errorf("after ANALYZE, generation 0 counts %v jobs, want %d", counted, n)
	}
	if analyzed, err := s.analyzeCurrent(t.Context(), 0); err != nil || analyzed {
		t.Errorf("analyzeCurrent again = %v, %v, want nothing to do", analyzed, err)
	}
}
