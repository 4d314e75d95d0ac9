package twice_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/testkit/waitfor"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// switchEnv is a worker with a fail-closed credit kind and an ordinary ping
// kind, with kill switches from a file and from the store.
type switchEnv struct {
	store   twicestore.Store
	client  *twice.Client
	file    string
	credits atomic.Int32
	logs    *syncBuffer
}

func setupSwitches(t *testing.T, fileText string) *switchEnv {
	t.Helper()
	e := &switchEnv{logs: &syncBuffer{}}
	path := migratedPath(t)
	e.store = openStore(t, path)
	e.file = filepath.Join(t.TempDir(), "toggles.toml")
	if fileText != "" {
		if err := os.WriteFile(e.file, []byte(fileText), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[creditArgs](func(_ context.Context, _ *twice.Job[creditArgs]) error {
		e.credits.Add(1)
		return nil
	}), &twice.KindOpts{Strategy: twice.None, FailClosed: true})
	twice.MustRegister(reg, twice.HandlerFunc[pingArgs](func(_ context.Context, _ *twice.Job[pingArgs]) error {
		return nil
	}), &twice.KindOpts{Strategy: twice.None})
	cfg := testConfig(reg)
	cfg.TogglesFile = e.file
	cfg.TogglePollInterval = 20 * time.Millisecond
	cfg.Logger = slog.New(slog.NewTextHandler(e.logs, nil))
	// The worker has a connection pool of its own, as another process would.
	e.client = startClient(t, openStore(t, path), cfg)
	return e
}

func (e *switchEnv) enqueue(t *testing.T, args twice.Args) *twicetype.JobRow {
	t.Helper()
	res, err := e.client.Enqueue(context.Background(), args, nil)
	if err != nil {
		t.Fatal(err)
	}
	return res.Job
}

// held checks that a job stayed queued and untouched while a ping enqueued
// after it was worked: proof the worker was running and chose to hold it.
func (e *switchEnv) held(t *testing.T, job *twicetype.JobRow) {
	t.Helper()
	ran := e.credits.Load()
	ping := e.enqueue(t, pingArgs{N: 1})
	waitJob(t, e.store, ping.ID, "completed", isState(twicetype.JobStateCompleted))
	row, err := e.store.JobGet(context.Background(), &twicestore.JobGetParams{ID: job.ID})
	if err != nil {
		t.Fatal(err)
	}
	if row.State != twicetype.JobStateAvailable || row.Attempt != 0 || e.credits.Load() != ran {
		t.Fatalf("job not held: state=%s attempt=%d, credit handler ran %d times meanwhile", row.State, row.Attempt, e.credits.Load()-ran)
	}
}

// mark is where the logs end now; waitLog looks only past a mark.
func (e *switchEnv) mark() int { return len(e.logs.String()) }

func (e *switchEnv) waitLog(t *testing.T, since int, want string) {
	t.Helper()
	waitfor.Cond(t, fmt.Sprintf("a log line with %q", want),
		func() bool { return strings.Contains(e.logs.String()[since:], want) }, e.logs.String)
}

func TestFailClosedKindStaysOffWhenItsKeyIsMissingOrMisspelled(t *testing.T) {
	t.Parallel()
	e := setupSwitches(t, "[toggles]\n\"balance.credt.v1\" = true\n")
	credit := e.enqueue(t, creditArgs{CreditID: 1, Cents: 100})
	e.held(t, credit)
	e.waitLog(t, 0, `toggle key \"balance.credt.v1\" names no registered kind; did you mean balance.credit.v1?`)
}

func TestStoreFlipHoldsAndResumesJobs(t *testing.T) {
	t.Parallel()
	e := setupSwitches(t, "")
	ctx := context.Background()
	set := func(on bool, reason string) {
		t.Helper()
		if err := e.store.ToggleSet(ctx, &twicestore.ToggleSetParams{Toggle: twicetype.Toggle{
			Kind: "Balance.Credit.V1", Enabled: on, Reason: reason, By: "test", At: time.Now()}}); err != nil {
			t.Fatal(err)
		}
	}
	credit := e.enqueue(t, creditArgs{CreditID: 2, Cents: 100})
	e.held(t, credit) // fail-closed, no key anywhere

	set(true, "cut-over done") // case-insensitive key
	row := waitJob(t, e.store, credit.ID, "completed", isState(twicetype.JobStateCompleted))
	if row.Attempt != 1 {
		t.Errorf("attempt = %d, want 1: holding must not spend attempts", row.Attempt)
	}

	m := e.mark()
	set(false, "incident 42")
	e.waitLog(t, m, "kind switched off")
	e.waitLog(t, m, "held=0") // the count of waiting jobs the flip holds
	e.held(t, e.enqueue(t, creditArgs{CreditID: 3, Cents: 100}))
}

func TestFileReloadTurnsKindsOnAndOffAndSurvivesABadEdit(t *testing.T) {
	t.Parallel()
	e := setupSwitches(t, "[toggles]\n\"test.ping.v1\" = true\n")
	write := func(text string) {
		t.Helper()
		tmp := e.file + ".tmp"
		if err := os.WriteFile(tmp, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, e.file); err != nil { // as editors save
			t.Fatal(err)
		}
	}
	credit := e.enqueue(t, creditArgs{CreditID: 4, Cents: 1})
	e.held(t, credit)

	write("[toggles]\n\"balance.credit.v1\" = true\n")
	waitJob(t, e.store, credit.ID, "completed", isState(twicetype.JobStateCompleted))

	m := e.mark()
	write("[toggles]\n\"balance.credit.v1\" = maybe\n") // malformed: the last good state stays
	e.waitLog(t, m, "kill switch file rejected; keeping the last good state")
	second := e.enqueue(t, creditArgs{CreditID: 5, Cents: 1})
	waitJob(t, e.store, second.ID, "completed", isState(twicetype.JobStateCompleted))

	m = e.mark()
	write("[toggles]\n\"balance.credit.v1\" = false\n")
	e.waitLog(t, m, "kind switched off")
	e.held(t, e.enqueue(t, creditArgs{CreditID: 6, Cents: 1}))
}

func TestMalformedToggleFileFailsStart(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "toggles.toml")
	if err := os.WriteFile(file, []byte("[toggles]\n\"a.b.v1\" = 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(twice.NewRegistry())
	cfg.TogglesFile = file
	c, err := twice.NewClient(newStore(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "kill switch file") {
		_ = c.Stop(context.Background())
		t.Fatalf("Start = %v, want the malformed file refused", err)
	}
}
