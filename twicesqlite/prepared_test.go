package twicesqlite

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// workOnce inserts a job in a transaction twice began, then fetches and
// finishes it on the pool: the statements of a job's whole life.
func workOnce(t *testing.T, s *Store, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	tx, err := s.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if _, err := tx.JobInsertMany(ctx, &twicestore.JobInsertManyParams{Jobs: []*twicestore.JobInsertParams{{
		Kind: "prepared.v1", Queue: "default", Args: []byte(`{}`), MessageID: fmt.Sprint("m", n), Key: fmt.Sprint("k", n),
		MaxAttempts: 3, CreatedAt: now,
	}}}); err != nil {
		_ = tx.Rollback(ctx)
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := s.JobFetch(ctx, &twicestore.JobFetchParams{Queue: "default", Kinds: []string{"prepared.v1"},
		Limit: 1, Node: "test", Now: now, LeaseUntil: now.Add(time.Minute)})
	if err != nil || len(res.Jobs) != 1 {
		t.Fatalf("fetch: %v, %d jobs", err, len(res.Jobs))
	}
	j := res.Jobs[0]
	if _, err := s.JobFinish(ctx, &twicestore.JobFinishParams{Outcomes: []*twicestore.JobOutcome{{
		ID: j.ID, Epoch: j.Epoch, State: twicetype.JobStateCompleted, FinishedAt: now,
	}}}); err != nil {
		t.Fatal(err)
	}
}

// appDB opens a freshly migrated database as an application would, with
// at most maxConns connections (0: no limit), closed when the test ends.
func appDB(t *testing.T, maxConns int) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", DSN(migratedCopy(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(maxConns)
	return db
}

// TestStatementsArePreparedOnce: a job's second life runs on the
// statements its first prepared, on the pool and in transactions alike.
func TestStatementsArePreparedOnce(t *testing.T) {
	t.Parallel()
	s := openTemp(t)
	workOnce(t, s, 1)
	s.cache.mu.Lock()
	after := len(s.cache.stmts)
	s.cache.mu.Unlock()
	if after == 0 {
		t.Fatal("no statement was kept prepared")
	}
	workOnce(t, s, 2)
	s.cache.mu.Lock()
	again := len(s.cache.stmts)
	s.cache.mu.Unlock()
	if again != after {
		t.Fatalf("%d statements kept after a second job, %d after the first: want the same ones", again, after)
	}
}

// TestLimitedPoolDoesNotWaitForItself: on an application's pool of one
// connection, a transaction holding it never waits for a second one to
// prepare a statement; it runs the statement unprepared.
func TestLimitedPoolDoesNotWaitForItself(t *testing.T) {
	t.Parallel()
	db := appDB(t, 1)
	s, err := New(t.Context(), db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	workOnce(t, s, 1) // fails on its 30 s timeout if a prepare waits
	workOnce(t, s, 2)
}

// TestStatementCacheBoundsAndCloses: past stmtCacheMax queries, and after
// Close, a query runs unprepared; Close closes what was kept.
func TestStatementCacheBoundsAndCloses(t *testing.T) {
	t.Parallel()
	db := appDB(t, 0)
	c := newStmtCache(db)
	ctx := t.Context()
	for i := range stmtCacheMax {
		if c.get(ctx, fmt.Sprint("SELECT ", i), false) == nil {
			t.Fatalf("query %d was not prepared", i)
		}
	}
	if c.get(ctx, "SELECT 'one too many'", false) != nil {
		t.Fatalf("a query past the %d kept was prepared", stmtCacheMax)
	}
	if c.get(ctx, "SELECT 0", false) == nil {
		t.Fatal("a kept query was not found")
	}
	kept := c.get(ctx, "SELECT 1", false)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if c.get(ctx, "SELECT 1", false) != nil {
		t.Fatal("a query was prepared after Close")
	}
	if _, err := kept.Exec(); err == nil {
		t.Fatal("a kept statement still runs after Close")
	}
	p := &prepared{cache: c}
	var one int
	if err := p.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("a query after Close: %d, %v; want it run unprepared", one, err)
	}
}

// TestPrepareWaitingForAConnectionBlocksNoOne: on a pool of one
// connection, a caller on the pool that waits for the connection to
// prepare a statement does not stop the transaction holding it from
// running its own statements, and so from giving the connection back.
func TestPrepareWaitingForAConnectionBlocksNoOne(t *testing.T) {
	t.Parallel()
	db := appDB(t, 1)
	c := newStmtCache(db)
	t.Cleanup(func() { c.Close() })
	ctx := t.Context()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	onPool := make(chan *sql.Stmt)
	go func() { onPool <- c.get(ctx, "SELECT 2", false) }()
	for db.Stats().WaitCount == 0 { // until it waits for tx's connection
		time.Sleep(time.Millisecond)
	}
	inTx := make(chan error)
	go func() {
		var n int
		err := (&prepared{cache: c, tx: tx}).QueryRowContext(ctx, "SELECT 3").Scan(&n)
		inTx <- err
	}()
	select {
	case err := <-inTx:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a statement in the transaction waited for the prepare that waits for the transaction")
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if st := <-onPool; st == nil {
		t.Fatal("the prepare on the pool failed once the connection was free")
	}
}
