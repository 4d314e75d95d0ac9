// Package whytest builds a team's database in which a job waits for each
// reason twice knows (held by a stored switch, held fail-closed, throttled,
// paused, scheduled, retrying, orphaned, parked, due), with the worker
// that makes it so, for the tests of every place that says why a job
// waits: the Client, the CLI and the dashboard.
package whytest

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/testkit/waitfor"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// The kinds of the team's worker, and the one it does not register.
const (
	KindHeld       = "why.held.v1"        // its stored switch is off
	KindFailClosed = "why.charge.v1"      // fail-closed, no switch on
	KindLimited    = "why.limited.v1"     // GlobalConcurrency 1
	KindReport     = "why.report.v1"      // goes to the paused queue
	KindLater      = "why.later.v1"       // enqueued for tomorrow
	KindFlaky      = "why.flaky.v1"       // fails, retries in an hour
	KindApproval   = "why.approval.v1"    // parks on the signal "approval"
	KindSlow       = "why.slow.v1"        // one at a time in queue "slow"
	KindGone       = "why.gone.v1"        // no worker registers it
	PausedQueue    = "reports"            // paused by PauseBy for PauseReason
	SlowQueue      = "slow"               // concurrency 1
	SwitchBy       = "ops@example.com"    // who switched KindHeld off
	SwitchReason   = "smtp provider down" // why
	PauseBy        = "ops@example.com"    // who paused PausedQueue
	PauseReason    = "month-end close"    // why
	FlakyAttempts  = 3                    // KindFlaky's MaxAttempts
	ApprovalSignal = "approval"
)

// Job names one job of the database and the reason it waits for.
type Job struct {
	Name string
	ID   int64
	Code twice.WaitCode
}

// DB is the team's database with its worker running.
type DB struct {
	// Registry is the worker's: a CLI or dashboard built with it (as
	// twicecli.Main(reg) is) knows the kinds' limits.
	Registry *twice.Registry
	// Jobs lists one job per reason, the ones that run excluded.
	Jobs []Job
}

type (
	heldArgs     struct{ N int }
	chargeArgs   struct{ N int }
	limitedArgs  struct{ N int }
	reportArgs   struct{ N int }
	laterArgs    struct{ N int }
	flakyArgs    struct{ N int }
	approvalArgs struct{ N int }
	slowArgs     struct{ N int }
)

func (heldArgs) Kind() string     { return KindHeld }
func (chargeArgs) Kind() string   { return KindFailClosed }
func (limitedArgs) Kind() string  { return KindLimited }
func (reportArgs) Kind() string   { return KindReport }
func (laterArgs) Kind() string    { return KindLater }
func (flakyArgs) Kind() string    { return KindFlaky }
func (approvalArgs) Kind() string { return KindApproval }
func (slowArgs) Kind() string     { return KindSlow }

// Start builds the database on store (migrated, empty) and starts its
// worker, which it stops when the test ends (store stays the caller's to
// close). It returns once every job waits as DB.Jobs says: one job of
// KindLimited and one of KindSlow run (held by their handlers until the
// test ends), so the second of each waits, throttled and due.
func Start(t *testing.T, store twicestore.Store) *DB {
	t.Helper()
	ctx := t.Context()
	release := make(chan struct{})
	started := make(chan string, 16)
	hold := func(ctx context.Context, kind string) error {
		started <- kind
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[heldArgs](func(context.Context, *twice.Job[heldArgs]) error { return nil }), nil)
	twice.MustRegister(reg, twice.HandlerFunc[chargeArgs](func(context.Context, *twice.Job[chargeArgs]) error { return nil }),
		&twice.KindOpts{FailClosed: true, Strategy: twice.None})
	twice.MustRegister(reg, twice.HandlerFunc[limitedArgs](func(ctx context.Context, _ *twice.Job[limitedArgs]) error {
		return hold(ctx, KindLimited)
	}), &twice.KindOpts{GlobalConcurrency: 1})
	twice.MustRegister(reg, twice.HandlerFunc[reportArgs](func(context.Context, *twice.Job[reportArgs]) error { return nil }),
		&twice.KindOpts{Queue: PausedQueue})
	twice.MustRegister(reg, twice.HandlerFunc[laterArgs](func(context.Context, *twice.Job[laterArgs]) error { return nil }), nil)
	twice.MustRegister(reg, twice.HandlerFunc[flakyArgs](func(context.Context, *twice.Job[flakyArgs]) error {
		return errors.New("the provider timed out")
	}), &twice.KindOpts{MaxAttempts: FlakyAttempts})
	twice.MustRegister(reg, twice.HandlerFunc[approvalArgs](func(ctx context.Context, _ *twice.Job[approvalArgs]) error {
		_, err := twice.AwaitSignal[string](ctx, ApprovalSignal, twice.NoTimeout)
		return err
	}), nil)
	twice.MustRegister(reg, twice.HandlerFunc[slowArgs](func(ctx context.Context, _ *twice.Job[slowArgs]) error {
		return hold(ctx, KindSlow)
	}), &twice.KindOpts{Queue: SlowQueue})

	client, err := twice.NewClient(store, twice.Config{
		Registry:           reg,
		Queues:             []twice.QueueConfig{{Name: twice.QueueDefault}, {Name: PausedQueue}, {Name: SlowQueue, Concurrency: 1}},
		PollInterval:       20 * time.Millisecond,
		TogglePollInterval: 50 * time.Millisecond,
		// An hour, so a retry stays scheduled however slow the machine.
		Backoff: func(int) time.Duration { return time.Hour },
		Logger:  slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := client.ToggleSet(ctx, &twice.ToggleSetParams{Kind: KindHeld, Enabled: false, By: SwitchBy, Reason: SwitchReason}); err != nil {
		t.Fatal(err)
	}
	if err := client.QueuePause(ctx, &twice.QueuePauseParams{Queue: PausedQueue, By: PauseBy, Reason: PauseReason}); err != nil {
		t.Fatal(err)
	}
	db := &DB{Registry: reg}
	enqueue := func(name string, code twice.WaitCode, args twice.Args, opts *twice.EnqueueOpts) int64 {
		t.Helper()
		res, err := client.Enqueue(ctx, args, opts)
		if err != nil {
			t.Fatal(err)
		}
		if name != "" {
			db.Jobs = append(db.Jobs, Job{Name: name, ID: res.Job.ID, Code: code})
		}
		return res.Job.ID
	}
	running := []int64{enqueue("", "", limitedArgs{1}, nil), enqueue("", "", slowArgs{1}, nil)}
	enqueue("held", twice.WaitHeld, heldArgs{}, nil)
	enqueue("fail-closed", twice.WaitHeld, chargeArgs{}, nil)
	enqueue("throttled", twice.WaitThrottled, limitedArgs{2}, nil)
	enqueue("paused", twice.WaitPaused, reportArgs{}, nil)
	enqueue("scheduled", twice.WaitScheduled, laterArgs{}, &twice.EnqueueOpts{Delay: 24 * time.Hour})
	flaky := enqueue("retrying", twice.WaitScheduled, flakyArgs{}, nil)
	parked := enqueue("parked", twice.WaitParked, approvalArgs{}, nil)
	enqueue("due", twice.WaitDue, slowArgs{2}, nil)
	gone, err := client.EnqueueJSON(ctx, KindGone, []byte(`{"n": 1}`), &twice.EnqueueOpts{AllowUnknownKind: true})
	if err != nil {
		t.Fatal(err)
	}
	db.Jobs = append(db.Jobs, Job{Name: "orphaned", ID: gone.Job.ID, Code: twice.WaitOrphaned})

	if err := client.Start(context.WithoutCancel(ctx)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		close(release)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := client.Stop(ctx); err != nil {
			t.Errorf("stop the worker: %v", err)
		}
	})
	await := func(id int64, what string, cond func(*twicetype.JobRow) bool) {
		t.Helper()
		var row *twicetype.JobRow
		waitfor.Cond(t, what, func() bool {
			var err error
			if row, err = client.JobGet(ctx, id); err != nil {
				t.Fatal(err)
			}
			return cond(row)
		}, func() string { return string(row.State) })
	}
	for _, id := range running {
		await(id, "a held job to run", func(r *twicetype.JobRow) bool { return r.State == twicetype.JobStateRunning })
	}
	await(flaky, "the flaky job to wait for its retry", func(r *twicetype.JobRow) bool {
		return r.State == twicetype.JobStateAvailable && r.Attempt == 1
	})
	await(parked, "the approval job to park", func(r *twicetype.JobRow) bool { return r.State == twicetype.JobStateWaiting })
	return db
}

// Job returns the job named name.
func (db *DB) Job(t testing.TB, name string) Job {
	t.Helper()
	for _, j := range db.Jobs {
		if j.Name == name {
			return j
		}
	}
	t.Fatalf("whytest: no job %q", name)
	return Job{}
}
