package twicepg

import (
	"context"
	"strings"
	"testing"

	"github.com/twicejobs/twice/internal/testkit/enqueuecases"
	"github.com/twicejobs/twice/twicestore"
)

// TestSQLEnqueueConformance runs the shared enqueue cases
// (internal/testkit/enqueuecases) through twice_enqueue: the SQL half of
// the conformance suite whose Go half, the root package's
// TestEnqueueConformance, runs them through Client.EnqueueJSON. The kinds
// are published to the kind catalog as the Go runner publishes them. A
// refusal must raise its class's SQLSTATE with its words, store nothing,
// and leave the caller's transaction usable once it rolls back to a
// savepoint taken before the call; an accepted job is read back with the
// store's JobGet, as the Go runner reads its jobs, and compared with the
// case.
func TestSQLEnqueueConformance(t *testing.T) {
	t.Parallel()
	s := newSQLSetup(t)
	ctx := t.Context()
	if err := s.store.CatalogPublish(ctx, &twicestore.CatalogPublishParams{
		Node: enqueuecases.CatalogNode, Kinds: enqueuecases.Catalog()}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range enqueuecases.Cases() {
		if !tc.RunsOnSQL() {
			t.Logf("%s: Go only: %s", tc.Name, tc.GoOnly)
			continue
		}
		if tc.KnownDifference != "" {
			t.Logf("%s: known difference from Go: %s", tc.Name, tc.KnownDifference)
		}
		t.Run(tc.Name, func(t *testing.T) {
			if tc.ForSQL().Refused != "" {
				s.runRefusedCase(t, tc)
			} else {
				s.runAcceptedCase(t, tc)
			}
		})
	}
}

// sqlCaseArgs are the three arguments of twice_enqueue for tc: NULL for
// a NULL kind and for no args.
func sqlCaseArgs(tc enqueuecases.Case) (kind, args any, opts string) {
	if !tc.NullKind {
		kind = tc.Kind
	}
	if tc.Args != "" {
		args = tc.Args
	}
	return kind, args, tc.SQLOptsText()
}

const sqlCaseEnqueue = `SELECT twice_enqueue($1::text, $2::jsonb, $3::jsonb)`

// runRefusedCase calls twice_enqueue in a transaction, under a savepoint
// it rolls back to after the refusal, then goes on in that transaction
// with an enqueue of its own, and rolls it all back.
func (s sqlSetup) runRefusedCase(t *testing.T, tc enqueuecases.Case) {
	ctx := t.Context()
	want := tc.ForSQL()
	tx, err := s.conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	before := s.jobCount(t, tx)
	if _, err := tx.Exec(ctx, `SAVEPOINT enqueue`); err != nil {
		t.Fatal(err)
	}
	kind, args, opts := sqlCaseArgs(tc)
	var id int64
	err = tx.QueryRow(ctx, sqlCaseEnqueue, kind, args, opts).Scan(&id)
	if err == nil {
		t.Errorf("accepted as job %d, want refused as %s (%q)", id, want.Refused, want.Says)
	} else if err := want.CheckSQLErr(sqlState(err)); err != nil {
		t.Error(err)
	}
	if _, err := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT enqueue`); err != nil {
		t.Fatalf("the transaction is not usable after a rollback to the savepoint: %v", err)
	}
	if n := s.jobCount(t, tx); n != before {
		t.Errorf("%d jobs after the refusal, want %d: a refused enqueue stores nothing", n, before)
	}
	if err := tx.QueryRow(ctx, `SELECT twice_enqueue($1, '{}', '{"force": true}')`, enqueuecases.Unknown).Scan(&id); err != nil {
		t.Fatalf("enqueue in the transaction after the caught refusal: %v", err)
	}
	if n := s.jobCount(t, tx); n != before+1 {
		t.Errorf("%d jobs after the refusal and an enqueue, want %d", n, before+1)
	}
}

// runAcceptedCase calls twice_enqueue in a transaction of its own (twice
// for a repeat) and reads the job back.
func (s sqlSetup) runAcceptedCase(t *testing.T, tc enqueuecases.Case) {
	ctx := t.Context()
	want := tc.ForSQL()
	before := s.jobCount(t, s.conn)
	kind, args, opts := sqlCaseArgs(tc)
	var id int64
	if err := s.conn.QueryRow(ctx, sqlCaseEnqueue, kind, args, opts).Scan(&id); err != nil {
		t.Fatalf("refused: %v", err)
	}
	row, err := s.store.JobGet(ctx, &twicestore.JobGetParams{ID: id})
	if err != nil {
		t.Fatal(err)
	}
	if err := want.CheckStored(tc.Args, row); err != nil {
		t.Error(err)
	}
	if n := s.jobCount(t, s.conn); n != before+1 {
		t.Errorf("%d jobs after the enqueue, want %d", n, before+1)
	}
	if want.RepeatIsDuplicate {
		var again int64
		if err := s.conn.QueryRow(ctx, sqlCaseEnqueue, kind, args, opts).Scan(&again); err != nil {
			t.Fatalf("repeat: %v", err)
		}
		if again != id {
			t.Errorf("repeat: job %d, want the first job %d", again, id)
		}
		if n := s.jobCount(t, s.conn); n != before+1 {
			t.Errorf("%d jobs after the repeat, want %d", n, before+1)
		}
	}
}

// TestSQLEnqueueConformanceClasses: each refusal class the SQL function
// raises maps to one of the SQLSTATEs this package declares; the others
// are PostgreSQL's own, for input refused before the function runs.
func TestSQLEnqueueConformanceClasses(t *testing.T) {
	t.Parallel()
	declared := map[string]bool{SQLStateInvalidKind: true, SQLStateUnknownKind: true, SQLStateInvalidArgs: true,
		SQLStateSensitiveArgs: true, SQLStateArgsTooLarge: true, SQLStateInvalidOpts: true, SQLStateInvalidQueue: true,
		SQLStateInvalidKey: true}
	postgres := map[string]bool{"22021": true, "22P02": true, "22P05": true}
	for _, c := range enqueuecases.Classes() {
		code := c.SQLState()
		switch {
		case code == "" && c != enqueuecases.BadEnvelope:
			t.Errorf("class %s has no SQLSTATE", c)
		case strings.HasPrefix(code, "TW") && !declared[code]:
			t.Errorf("class %s maps to %s, which no twicepg.SQLState constant declares", c, code)
		case code != "" && !strings.HasPrefix(code, "TW") && !postgres[code]:
			t.Errorf("class %s maps to %s, neither twice's nor a PostgreSQL input error", c, code)
		}
	}
}
