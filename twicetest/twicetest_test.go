package twicetest_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/testkit/pgtest"
	"github.com/twicejobs/twice/internal/testkit/waitfor"
	"github.com/twicejobs/twice/twicesqlite"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetest"
	"github.com/twicejobs/twice/twicetype"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type welcomeArgs struct {
	UserID int64
}

func (welcomeArgs) Kind() string             { return "email.welcome.v1" }
func (a welcomeArgs) IdempotencyKey() string { return "welcome-" + strconv.FormatInt(a.UserID, 10) }

// emailCase sends perDelivery emails per delivery, under strategy s.
func emailCase(s twice.Strategy, perDelivery int64) (twicetest.Case[welcomeArgs], *atomic.Int64) {
	var sent atomic.Int64
	return twicetest.Case[welcomeArgs]{
		Register: func(reg *twice.Registry) error {
			return twice.Register(reg, twice.HandlerFunc[welcomeArgs](func(_ context.Context, _ *twice.Job[welcomeArgs]) error {
				sent.Add(perDelivery)
				return nil
			}), &twice.KindOpts{Strategy: s})
		},
		Args:    welcomeArgs{UserID: 42},
		Effects: func(context.Context, twicestore.Store) (int, error) { return int(sent.Load()), nil },
	}, &sent
}

func TestClaimAfterPasses(t *testing.T) {
	t.Parallel()
	c, _ := emailCase(twice.ClaimAfter, 1)
	rep := twicetest.RunTwice(t, c)
	if rep.Strategy != twice.ClaimAfter {
		t.Errorf("strategy = %s, want claim-after", rep.Strategy)
	}
	if len(rep.Scenarios) != 3 {
		t.Fatalf("scenarios = %d, want 3:\n%s", len(rep.Scenarios), rep)
	}
	if s := rep.Scenarios[2]; s.Deliveries < 2 || s.Effects < 1 {
		t.Errorf("crash scenario: %d deliveries, %d effects; want a redelivery and an effect:\n%s", s.Deliveries, s.Effects, rep)
	}
	t.Log(rep)
}

func TestClaimBeforePasses(t *testing.T) {
	t.Parallel()
	c, _ := emailCase(twice.ClaimBefore, 1)
	rep := twicetest.RunTwice(t, c)
	if rep.Strategy != twice.ClaimBefore {
		t.Errorf("strategy = %s, want claim-before", rep.Strategy)
	}
	want := []struct {
		name    string
		effects int
		outcome twicetype.JobState
	}{
		{twicetest.ScenarioInARow, 1, twicetype.JobStateCompleted},
		{twicetest.ScenarioConcurrent, 1, twicetype.JobStateCompleted},
		{twicetest.ScenarioCrashAfter, 1, twicetype.JobStateDead},  // effect done, outcome lost
		{twicetest.ScenarioCrashBefore, 0, twicetype.JobStateDead}, // claimed, never ran
	}
	if len(rep.Scenarios) != len(want) {
		t.Fatalf("scenarios = %d, want %d:\n%s", len(rep.Scenarios), len(want), rep)
	}
	for i, w := range want {
		s := rep.Scenarios[i]
		if s.Name != w.name || s.Effects != w.effects || s.Outcome != w.outcome || s.Broken {
			t.Errorf("scenario %d = %+v, want %s with %d effects, job %s", i, s, w.name, w.effects, w.outcome)
		}
	}
	t.Log(rep)
}

type creditArgs struct {
	CreditID int64
}

func (creditArgs) Kind() string             { return "balance.credit.v1" }
func (a creditArgs) IdempotencyKey() string { return "credit-" + strconv.FormatInt(a.CreditID, 10) }

// inTx runs fn in a transaction of the store's database.
func inTx(ctx context.Context, store twicestore.Store, fn func(*sql.Tx) error) error {
	tx, err := store.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if err := fn(tx.Unwrap().(*sql.Tx)); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// creditCase credits a ledger row in the job's transaction.
func creditCase() twicetest.Case[creditArgs] {
	return twicetest.Case[creditArgs]{
		Register: func(reg *twice.Registry) error {
			return twice.Register(reg, twice.HandlerFunc[creditArgs](func(ctx context.Context, job *twice.Job[creditArgs]) error {
				tx := job.SQLTx()
				if tx == nil {
					return errors.New("no transaction")
				}
				_, err := tx.ExecContext(ctx, `INSERT INTO ledger (credit_id) VALUES (?)`, job.Args.CreditID)
				return err
			}), &twice.KindOpts{Strategy: twice.Transactional})
		},
		Args: creditArgs{CreditID: 7},
		Setup: func(ctx context.Context, store twicestore.Store) error {
			return inTx(ctx, store, func(tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, `CREATE TABLE ledger (credit_id INTEGER NOT NULL)`)
				return err
			})
		},
		Effects: func(ctx context.Context, store twicestore.Store) (n int, err error) {
			err = inTx(ctx, store, func(tx *sql.Tx) error {
				return tx.QueryRowContext(ctx, `SELECT count(*) FROM ledger`).Scan(&n)
			})
			return n, err
		},
	}
}

func TestTransactionalPasses(t *testing.T) {
	t.Parallel()
	rep := twicetest.RunTwice(t, creditCase())
	if rep.Strategy != twice.Transactional {
		t.Errorf("strategy = %s, want transactional", rep.Strategy)
	}
	for _, s := range rep.Scenarios {
		if s.Effects != 1 {
			t.Errorf("%s: %d effects, want 1", s.Name, s.Effects)
		}
	}
}

// upsertCase is a None handler that sets a state keyed by the message
// (converges) or appends a row each run (does not).
func upsertCase(appendEachRun bool) twicetest.Case[welcomeArgs] {
	var mu sync.Mutex
	rows := map[string]int{}
	return twicetest.Case[welcomeArgs]{
		Register: func(reg *twice.Registry) error {
			return twice.Register(reg, twice.HandlerFunc[welcomeArgs](func(_ context.Context, job *twice.Job[welcomeArgs]) error {
				mu.Lock()
				defer mu.Unlock()
				if appendEachRun {
					rows[fmt.Sprintf("row-%d", len(rows))] = 1
				} else {
					rows[job.Key] = 1
				}
				return nil
			}), &twice.KindOpts{Strategy: twice.None})
		},
		Args: welcomeArgs{UserID: 1},
		Effects: func(context.Context, twicestore.Store) (int, error) {
			mu.Lock()
			defer mu.Unlock()
			return len(rows), nil
		},
	}
}

func TestNoneConvergingPasses(t *testing.T) {
	t.Parallel()
	if rep := twicetest.RunTwice(t, upsertCase(false)); rep.Strategy != twice.None {
		t.Errorf("strategy = %s, want none", rep.Strategy)
	}
}

// fakeTB records failures instead of failing the test; Fatal stops the
// goroutine with runtime.Goexit, as the real one does.
type fakeTB struct {
	testing.TB
	mu     sync.Mutex
	errs   []string
	fatals []string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errs = append(f.errs, fmt.Sprintf(format, args...))
}

func (f *fakeTB) Error(args ...any) { f.Errorf("%s", fmt.Sprint(args...)) }

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.fatals = append(f.fatals, fmt.Sprintf(format, args...))
	f.mu.Unlock()
	runtime.Goexit()
}

func (f *fakeTB) Fatal(args ...any) { f.Fatalf("%s", fmt.Sprint(args...)) }

func (f *fakeTB) Fail() { f.Errorf("Fail called") }

func (f *fakeTB) FailNow() { f.Fatalf("FailNow called") }

func (f *fakeTB) Failed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.errs)+len(f.fatals) > 0
}

// runFake runs RunTwice against a fakeTB in its own goroutine, so a Fatalf
// ends only that goroutine.
func runFake[T twice.Args](t *testing.T, c twicetest.Case[T]) (*fakeTB, *twicetest.Report) {
	f := &fakeTB{TB: t}
	var rep *twicetest.Report
	done := make(chan struct{})
	go func() {
		defer close(done)
		rep = twicetest.RunTwice(f, c)
	}()
	waitfor.Closed(t, done, "RunTwice to return")
	if len(f.fatals) > 0 {
		t.Fatalf("RunTwice stopped early: %v", f.fatals)
	}
	return f, rep
}

func TestNoneNotIdempotentIsCaught(t *testing.T) {
	t.Parallel()
	f, rep := runFake(t, upsertCase(true))
	if len(f.errs) == 0 {
		t.Fatalf("a handler appending a row per run passed:\n%s", rep)
	}
	msg := f.errs[0]
	for _, want := range []string{"strategy none", `scenario "in a row"`, "2 deliveries", "2 effects observed", "exactly 1"} {
		if !strings.Contains(msg, want) {
			t.Errorf("report %q does not say %q", msg, want)
		}
	}
	t.Log(strings.Join(f.errs, "\n"))
}

func TestClaimAfterDoubleEffectIsCaught(t *testing.T) {
	t.Parallel()
	c, _ := emailCase(twice.ClaimAfter, 2)
	f, rep := runFake(t, c)
	if len(f.errs) == 0 {
		t.Fatalf("a handler sending twice per delivery passed:\n%s", rep)
	}
	msg := f.errs[0]
	for _, want := range []string{"strategy claim-after", `scenario "in a row"`, "2 deliveries", "2 effects observed", "exactly 1 effect"} {
		if !strings.Contains(msg, want) {
			t.Errorf("report %q does not say %q", msg, want)
		}
	}
	if !rep.Scenarios[0].Broken {
		t.Errorf("in-a-row scenario not marked broken:\n%s", rep)
	}
	t.Log(strings.Join(f.errs, "\n"))
}

func TestCallerStore(t *testing.T) {
	t.Parallel()
	store, err := twicesqlite.Open(context.Background(), filepath.Join(t.TempDir(), "twice.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	c, sent := emailCase(twice.ClaimAfter, 1)
	c.Store = store
	rep := twicetest.RunTwice(t, c)
	// The idempotency key is the same in every scenario: the first one's
	// marker makes the later ones no-ops, which a shared store allows.
	if n := sent.Load(); n != 1 {
		t.Errorf("emails sent = %d, want 1:\n%s", n, rep)
	}
}

// TestPostgres runs the helper on PostgreSQL, each scenario in a fresh
// schema.
func TestPostgres(t *testing.T) {
	t.Parallel()
	base := os.Getenv(pgtest.EnvURL)
	if base == "" {
		t.Skip(pgtest.EnvURL + " is not set; .ci/run sets it to the local server")
	}
	for _, s := range []twice.Strategy{twice.ClaimAfter, twice.ClaimBefore} {
		t.Run(s.String(), func(t *testing.T) {
			t.Parallel()
			c, _ := emailCase(s, 1)
			c.PostgresURL = base
			rep := twicetest.RunTwice(t, c)
			if rep.Strategy != s {
				t.Errorf("strategy = %s, want %s", rep.Strategy, s)
			}
			t.Log(rep)
		})
	}
	t.Run("invariants", func(t *testing.T) {
		t.Parallel()
		c, _ := emailCase(twice.ClaimAfter, 1)
		c.PostgresURL = base
		twicetest.AlreadyProcessed(t, c)
		twicetest.EffectBeforeClaim(t, c)
		twicetest.FailedEffectLeavesNoClaim(t, c)
	})
	t.Run("not idempotent caught", func(t *testing.T) {
		t.Parallel()
		c, _ := emailCase(twice.ClaimAfter, 2)
		c.PostgresURL = base
		f, rep := runFake(t, c)
		if len(f.errs) == 0 {
			t.Fatalf("a handler sending twice per delivery passed on PostgreSQL:\n%s", rep)
		}
	})
}
