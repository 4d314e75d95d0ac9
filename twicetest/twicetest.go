package twicetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/testkit/pgtest"
	"github.com/twicejobs/twice/internal/testkit/sqlitetemplate"
	"github.com/twicejobs/twice/twicepg"
	"github.com/twicejobs/twice/twicesqlite"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// Case is the handler under test and the message it is given.
type Case[T twice.Args] struct {
	// Register registers the kind's handler exactly as production does,
	// strategy and handler name included. It is called once per worker,
	// each time on a new Registry, so it must not register into a shared
	// one.
	Register func(reg *twice.Registry) error
	// Args is the message delivered. It is enqueued on the default queue,
	// which the helper's workers work, whatever queue the kind is
	// registered for; everything else (strategy, handler name, attempts,
	// timeout) comes from the registration.
	Args T
	// Setup, if set, prepares a store before its scenario runs (creating
	// the tables a Transactional handler writes in, say). It is called on
	// every fresh store, and once on Store when that is set.
	Setup func(ctx context.Context, store twicestore.Store) error
	// Effects counts the effect of Args as it stands now: emails sent, rows
	// written. store is the scenario's store, for effects written in it.
	Effects func(ctx context.Context, store twicestore.Store) (int, error)
	// StepEffects, if set, counts the effect of each named step of a
	// stepped handler (twice.Step) as it stands now, by step name. When the
	// handler has steps, RunTwice also crashes its first delivery at every
	// step boundary and judges each step's count by its strategy; without
	// StepEffects it judges only the job's outcome there.
	StepEffects func(ctx context.Context, store twicestore.Store) (map[string]int, error)
	// Store, if set, is the store every scenario runs on, one after
	// another; two workers then share this one handle. Defaults to a fresh
	// SQLite database in t.TempDir() per scenario, opened twice for the
	// concurrent one.
	Store twicestore.Store
	// Continuations, if not zero, is how many continuations (Job.Then) one
	// run of the handler records for Args. Every scenario then checks
	// each edge fired once, counting the child jobs of the message's jobs:
	// for a strategy with a marker, exactly that many for the message
	// however often it was delivered (none when its job died); for None,
	// whose every delivery completes a job of its own, that many per
	// completed job.
	Continuations int
	// Signals answers a handler that waits (twice.AwaitSignal, twice.Sleep):
	// whenever a job of the message waits for a name, RunTwice sends it
	// Signals[name] (encoded as JSON), twice, as a sender's retry would. A
	// wait whose name is not here is answered by its timer (the wait
	// times out; a Sleep ends); one with no timeout and no answer here
	// stops the test.
	Signals map[string]any
	// PostgresURL, if set (and Store is not), runs every scenario on
	// PostgreSQL: each in a fresh schema of that database, created for it
	// and dropped when the test ends, so scenarios start empty as on
	// SQLite. The URL's user must be allowed to create schemas.
	PostgresURL string
}

// Scenario names, as they appear in a Report and in failures.
const (
	ScenarioInARow      = "in a row"
	ScenarioConcurrent  = "concurrently"
	ScenarioCrashAfter  = "crash after the effect"
	ScenarioCrashBefore = "crash between claim and effect" // ClaimBefore kinds only
)

// Report is what RunTwice observed.
type Report struct {
	// Strategy is the strategy the registration applied, as read from its
	// store traffic.
	Strategy twice.Strategy
	// Scenarios are the scenarios run, in order.
	Scenarios []ScenarioReport
}

// ScenarioReport is what one scenario observed.
type ScenarioReport struct {
	// Name is one of the Scenario constants.
	Name string
	// Deliveries is how many times a worker leased the message's jobs.
	Deliveries int
	// Effects is how much the effect changed over the scenario (for None:
	// the count Effects reported after it).
	Effects int
	// Outcome is the state the message's last job ended in: completed,
	// or dead for a ClaimBefore job after a crash.
	Outcome twicetype.JobState
	// Promise is what the strategy promises in this scenario.
	Promise string
	// Broken reports that Effects broke the promise.
	Broken bool
	// Steps is what Case.StepEffects counted after a step crash scenario.
	Steps map[string]int
}

// String renders the report as one line per scenario.
func (r *Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "strategy %s", r.Strategy)
	for _, s := range r.Scenarios {
		verdict := "ok"
		if s.Broken {
			verdict = "BROKEN"
		}
		if s.Steps != nil {
			fmt.Fprintf(&b, "\n  %s: %d deliveries, step effects %v, job %s (%s): %s", s.Name, s.Deliveries, s.Steps, s.Outcome, s.Promise, verdict)
			continue
		}
		fmt.Fprintf(&b, "\n  %s: %d deliveries, %d effects, job %s (%s): %s", s.Name, s.Deliveries, s.Effects, s.Outcome, s.Promise, verdict)
	}
	return b.String()
}

// testQueue is the one queue the helper's workers work; every message is
// enqueued there, whatever queue the kind is registered for.
const testQueue = twice.QueueDefault

// scenarioTimeout bounds the wait for one scenario's jobs to finish.
const scenarioTimeout = 15 * time.Second

// RunTwice runs c's handler through the three scenarios and fails t, with
// a readable report, for each promise of the strategy it broke; set-up
// errors and jobs that never finish stop the test with Fatalf. It returns
// what it observed.
func RunTwice[T twice.Args](t testing.TB, c Case[T]) *Report {
	t.Helper()
	if c.Register == nil || c.Effects == nil {
		t.Fatalf("twicetest: Case.Register and Case.Effects are required")
	}
	r := &runner[T]{t: t, c: c, kind: c.Args.Kind(), edges: map[string]*edgeTally{}}
	rep := &Report{}
	judged := func(sr ScenarioReport) {
		if !strings.HasPrefix(sr.Name, ScenarioCrashStep) { // judged by crashAtStep
			sr.Promise, sr.Broken = judge(rep.Strategy, sr.Name, r.fresh(), sr.Effects, sr.Outcome)
		}
		rep.Scenarios = append(rep.Scenarios, sr)
		r.checkEdges(rep.Strategy, sr.Name)
		if sr.Broken {
			t.Errorf("twicetest: kind %q, strategy %s, scenario %q: %d deliveries, %d effects observed, job %s; strategy %s promises %s",
				r.kind, rep.Strategy, sr.Name, sr.Deliveries, sr.Effects, sr.Outcome, rep.Strategy, sr.Promise)
		}
	}
	sr, strategy, steps := r.inARow()
	rep.Strategy, r.strategy, r.steps = strategy, strategy, steps
	judged(sr)
	judged(r.concurrently())
	judged(r.crash(crashAfterEffect))
	if strategy == twice.ClaimBefore {
		judged(r.crash(crashAfterClaim))
	}
	for _, s := range steps {
		for _, c := range stepBoundaries(s) {
			judged(r.crashAtStep(c))
		}
	}
	return rep
}

// judge tells what strategy s promises in a scenario and whether n effects
// and the job's outcome keep it. fresh reports that the scenario started on
// an empty store.
func judge(s twice.Strategy, scenario string, fresh bool, n int, outcome twicetype.JobState) (promise string, broken bool) {
	if s == twice.ClaimBefore && scenario != ScenarioInARow && scenario != ScenarioConcurrent {
		// The redelivery finds the crashed delivery's claim: the effect
		// may have happened, so a person must decide.
		return "at most 1 effect, and the job dead-lettered for a person to check whether the effect happened",
			n > 1 || outcome != twicetype.JobStateDead
	}
	lo, hi := 0, 1
	switch s {
	case twice.ClaimAfter:
		lo = 1
		if scenario != ScenarioInARow {
			hi = 2
		}
	case twice.Transactional:
		lo = 1
	case twice.None:
		return "the effect converges to one state: Effects must report exactly 1 after every delivery", n != 1
	}
	if !fresh {
		lo = 0 // an earlier scenario's marker may rightly make this one a no-op
	}
	switch lo {
	case hi:
		promise = fmt.Sprintf("exactly %d effect", lo)
	case 0:
		promise = fmt.Sprintf("at most %d effect", hi)
	default:
		promise = fmt.Sprintf("between %d and %d effect", lo, hi)
	}
	if hi > 1 {
		promise += "s"
	}
	switch {
	case s == twice.ClaimAfter && scenario == ScenarioConcurrent:
		promise += " (both copies may pass the peek before either claims)"
	case s == twice.ClaimAfter && scenario == ScenarioCrashAfter:
		promise += " (the effect happened, its claim was lost with the process)"
	}
	return promise, n < lo || n > hi || outcome != twicetype.JobStateCompleted
}

// runner runs the scenarios of one Case.
type runner[T twice.Args] struct {
	t        testing.TB
	c        Case[T]
	kind     string
	set      bool           // Setup ran on c.Store
	strategy twice.Strategy // as read from the first scenario
	steps    []stepSeen     // the handler's named steps, as read from the first scenario
	// edges counts, per scenario, the finished jobs of the message, those
	// completed, and their child jobs (see Case.Continuations).
	edges map[string]*edgeTally
}

type edgeTally struct{ jobs, completed, children int }

func (r *runner[T]) fresh() bool { return r.c.Store == nil }

// open opens n handles on a fresh database for one scenario.
func (r *runner[T]) open(n int) []twicestore.Store {
	t := r.t
	t.Helper()
	ctx := context.Background()
	out := make([]twicestore.Store, n)
	if r.c.PostgresURL != "" {
		url, _ := pgtest.SchemaIn(t, r.c.PostgresURL, "twicetest")
		for i := range out {
			s, err := twicepg.Open(ctx, url)
			if err != nil {
				t.Fatalf("twicetest: open PostgreSQL store: %v", err)
			}
			t.Cleanup(func() { _ = s.Close() })
			out[i] = s
		}
		return out
	}
	// A copy of a database migrated once per test binary: the same bytes
	// as migrating a new file, without the time.
	path := sqlitetemplate.Copy(t, "twicetest", func(path string) error {
		s, err := twicesqlite.Open(ctx, path)
		if err != nil {
			return err
		}
		return s.Close()
	})
	for i := range out {
		s, err := twicesqlite.Open(ctx, path)
		if err != nil {
			t.Fatalf("twicetest: open store: %v", err)
		}
		t.Cleanup(func() { _ = s.Close() })
		out[i] = s
	}
	return out
}

// stores returns n handles on the scenario's database, each spied on by p.
func (r *runner[T]) stores(n int, p *probe) []*spyStore {
	t := r.t
	t.Helper()
	ctx := context.Background()
	out := make([]*spyStore, n)
	if r.c.Store != nil {
		if err := r.c.Store.Migrate(ctx); err != nil {
			t.Fatalf("twicetest: migrate Case.Store: %v", err)
		}
		if !r.set && r.c.Setup != nil {
			if err := r.c.Setup(ctx, r.c.Store); err != nil {
				t.Fatalf("twicetest: Case.Setup: %v", err)
			}
		}
		r.set = true
		for i := range out {
			out[i] = &spyStore{Store: r.c.Store, p: p}
		}
		return out
	}
	for i, s := range r.open(n) {
		out[i] = &spyStore{Store: s, p: p}
	}
	if r.c.Setup != nil {
		if err := r.c.Setup(ctx, out[0].Store); err != nil {
			t.Fatalf("twicetest: Case.Setup: %v", err)
		}
	}
	return out
}

// start registers the kind on a new Registry and starts a worker on store,
// its handler calls counted by the store's probe; the returned stop stops
// it.
func (r *runner[T]) start(store *spyStore) (*twice.Client, func()) {
	t := r.t
	t.Helper()
	reg := twice.NewRegistry()
	if err := r.c.Register(reg); err != nil {
		t.Fatalf("twicetest: Case.Register: %v", err)
	}
	client, err := twice.NewClient(store, twice.Config{
		Registry: reg,
		Queues:   []twice.QueueConfig{{Name: testQueue, Concurrency: 4}},
		// Crash scenarios wait for a lease to expire; 2 s keeps that short
		// while a heartbeat (every third of it) late by more than a second
		// on a loaded machine still keeps a live delivery's lease.
		LeaseDuration:  2 * time.Second,
		RescueInterval: 50 * time.Millisecond,
		PollInterval:   10 * time.Millisecond,
		FetchLimit:     1, // so two workers share two copies
		Backoff:        func(int) time.Duration { return time.Millisecond },
		Logger:         slog.New(slog.DiscardHandler),
		Middleware:     []twice.Middleware{store.p.middleware},
	})
	if err != nil {
		t.Fatalf("twicetest: new client: %v", err)
	}
	if err := client.Start(context.Background()); err != nil {
		t.Fatalf("twicetest: start client: %v", err)
	}
	return client, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = client.Stop(ctx)
	}
}

// effects reads Case.Effects.
func (r *runner[T]) effects(store twicestore.Store) int {
	r.t.Helper()
	n, err := r.c.Effects(context.Background(), store)
	if err != nil {
		r.t.Fatalf("twicetest: Case.Effects: %v", err)
	}
	return n
}

// enqueue delivers copies of the message, all with messageID.
func (r *runner[T]) enqueue(client *twice.Client, messageID string, copies int) []int64 {
	r.t.Helper()
	jobs := make([]twice.EnqueueParams, copies)
	for i := range jobs {
		jobs[i] = twice.EnqueueParams{Args: r.c.Args, Opts: &twice.EnqueueOpts{Queue: testQueue, MessageID: messageID}}
	}
	res, err := client.EnqueueMany(context.Background(), jobs)
	if err != nil {
		r.t.Fatalf("twicetest: enqueue: %v", err)
	}
	ids := make([]int64, len(res))
	for i, j := range res {
		ids[i] = j.Job.ID
	}
	return ids
}

// await polls the store until every job finished and returns the last
// one's state. A job that ends dead fails the test unless deadOK (a
// ClaimBefore crash, which the judge checks), and one that does not finish
// in time stops it.
func (r *runner[T]) await(store twicestore.Store, scenario string, deadOK bool, ids ...int64) twicetype.JobState {
	t := r.t
	t.Helper()
	deadline := time.Now().Add(scenarioTimeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	var last twicetype.JobState
	for _, id := range ids {
		for {
			row, err := store.JobGet(context.Background(), &twicestore.JobGetParams{ID: id})
			if err != nil {
				t.Fatalf("twicetest: scenario %q: get job %d: %v", scenario, id, err)
			}
			last = row.State
			if row.State == twicetype.JobStateCompleted || (deadOK && row.State == twicetype.JobStateDead) {
				r.tally(store, scenario, row)
				break
			}
			if row.State == twicetype.JobStateWaiting {
				r.answer(store, scenario, row)
			}
			if row.State == twicetype.JobStateDead || row.State == twicetype.JobStateDiscarded {
				t.Fatalf("twicetest: kind %q, scenario %q: job %d ended %s instead of completed: %s",
					r.kind, scenario, id, row.State, lastError(row))
			}
			if time.Now().After(deadline) {
				t.Fatalf("twicetest: kind %q, scenario %q: job %d did not complete within %s: state %s, attempt %d, %s",
					r.kind, scenario, id, scenarioTimeout, row.State, row.Attempt, lastError(row))
			}
			<-tick.C
		}
	}
	return last
}

// answer resolves the wait of a waiting job: with Case.Signals' payload
// for its name, sent twice, or else by firing its timer now.
func (r *runner[T]) answer(store twicestore.Store, scenario string, row *twicetype.JobRow) {
	t := r.t
	t.Helper()
	ctx := context.Background()
	v, ok := r.c.Signals[row.WaitName]
	switch {
	case ok:
		payload, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("twicetest: Case.Signals[%q] does not encode as JSON: %v", row.WaitName, err)
		}
		for range 2 {
			if _, err := store.JobSignal(ctx, &twicestore.JobSignalParams{JobID: row.ID, Name: row.WaitName,
				Payload: payload, Sender: "twicetest"}); err != nil && !errors.Is(err, twicestore.ErrJobFinished) {
				t.Fatalf("twicetest: scenario %q: signal %q to job %d: %v", scenario, row.WaitName, row.ID, err)
			}
		}
	case row.RunAt.Before(twicestore.WaitNever):
		if _, err := store.JobWakeDue(ctx, &twicestore.JobWakeDueParams{Now: time.Now(), IDs: []int64{row.ID}}); err != nil {
			t.Fatalf("twicetest: scenario %q: fire the timer of job %d: %v", scenario, row.ID, err)
		}
	default:
		t.Fatalf("twicetest: kind %q, scenario %q: job %d waits for signal %q with no timeout: give Case.Signals[%q] a payload",
			r.kind, scenario, row.ID, row.WaitName, row.WaitName)
	}
}

func lastError(row *twicetype.JobRow) string {
	if len(row.Errors) == 0 {
		return "no error recorded"
	}
	return "last error: " + row.Errors[len(row.Errors)-1].Error
}

// measure runs a scenario body between two readings of Case.Effects and
// reports the change, or for None (which promises a state, not a count of
// runs) the count after it.
func (r *runner[T]) measure(name string, p *probe, store twicestore.Store, body func() twicetype.JobState) ScenarioReport {
	before := r.effects(store)
	outcome := body()
	after := r.effects(store)
	n := after - before
	if p.strategy() == twice.None {
		n = after
	}
	fetches, _, _, _ := p.counts()
	return ScenarioReport{Name: name, Deliveries: fetches, Effects: n, Outcome: outcome}
}

// strategy is the strategy seen in a probe's traffic: ClaimAfter peeks,
// ClaimBefore claims on the store, Transactional claims in a transaction.
// When Store is shared, later deliveries may be no-ops, but each still
// shows its strategy's first store call.
func (p *probe) strategy() twice.Strategy {
	_, peeks, claims, begins := p.counts()
	switch {
	case peeks > 0:
		return twice.ClaimAfter
	case claims > 0:
		return twice.ClaimBefore
	case begins > 0:
		return twice.Transactional
	}
	return twice.None
}

// inARow delivers the message, waits for it to complete, and delivers it
// again.
func (r *runner[T]) inARow() (ScenarioReport, twice.Strategy, []stepSeen) {
	p := newProbe(r.kind)
	store := r.stores(1, p)[0]
	client, stop := r.start(store)
	defer stop()
	msg := newMessageID("row")
	sr := r.measure(ScenarioInARow, p, store.Store, func() twicetype.JobState {
		r.await(store, ScenarioInARow, false, r.enqueue(client, msg, 1)...)
		return r.await(store, ScenarioInARow, false, r.enqueue(client, msg, 1)...)
	})
	return sr, p.strategy(), p.stepsSeen()
}

// concurrently has two workers, each on its own store handle, lease two
// copies of the message at once.
func (r *runner[T]) concurrently() ScenarioReport {
	p := newProbe(r.kind)
	p.barrier = 2
	stores := r.stores(2, p)
	a, stopA := r.start(stores[0])
	defer stopA()
	_, stopB := r.start(stores[1])
	defer stopB()
	return r.measure(ScenarioConcurrent, p, stores[0].Store, func() twicetype.JobState {
		return r.await(stores[0], ScenarioConcurrent, false, r.enqueue(a, newMessageID("concurrent"), 2)...)
	})
}

// crash makes the first delivery die at the given point; its lease
// expires and the message is delivered again.
func (r *runner[T]) crash(at crashPoint) ScenarioReport {
	name := ScenarioCrashAfter
	if at == crashAfterClaim {
		name = ScenarioCrashBefore
	}
	p := newProbe(r.kind)
	p.crash = at
	store := r.stores(1, p)[0]
	client, stop := r.start(store)
	defer stop()
	sr := r.measure(name, p, store.Store, func() twicetype.JobState {
		return r.await(store, name, r.strategy == twice.ClaimBefore, r.enqueue(client, newMessageID("crash"), 1)...)
	})
	if !p.crashFired() {
		r.t.Fatalf("twicetest: kind %q, scenario %q: the injected crash never fired", r.kind, name)
	}
	return sr
}

// newMessageID names a scenario's message; it is unique per run so that a
// shared store does not mistake one scenario's message for another's.
func newMessageID(scenario string) string {
	return fmt.Sprintf("twicetest-%s-%d", scenario, time.Now().UnixNano())
}

// tally counts a finished job of the message and its child jobs.
func (r *runner[T]) tally(store twicestore.Store, scenario string, row *twicetype.JobRow) {
	if r.c.Continuations == 0 {
		return
	}
	r.t.Helper()
	kids, err := store.JobChildren(context.Background(), &twicestore.JobChildrenParams{ParentID: row.ID})
	if err != nil {
		r.t.Fatalf("twicetest: scenario %q: children of job %d: %v", scenario, row.ID, err)
	}
	e := r.edges[scenario]
	if e == nil {
		e = &edgeTally{}
		r.edges[scenario] = e
	}
	e.jobs++
	e.children += len(kids)
	if row.State == twicetype.JobStateCompleted {
		e.completed++
	}
}

// checkEdges fails the test unless the scenario's jobs inserted the
// continuations Case.Continuations promises (see there).
func (r *runner[T]) checkEdges(s twice.Strategy, scenario string) {
	e := r.edges[scenario]
	if r.c.Continuations == 0 || e == nil {
		return
	}
	r.t.Helper()
	want := 0
	switch {
	case s == twice.None:
		want = r.c.Continuations * e.completed
	case e.completed > 0:
		want = r.c.Continuations
	}
	if e.children != want {
		how := "never"
		if e.children > want {
			how = "more than once"
		}
		r.t.Errorf("twicetest: kind %q, strategy %s, scenario %q: %d jobs (%d completed) inserted %d continuations, want %d: an edge fired %s",
			r.kind, s, scenario, e.jobs, e.completed, e.children, want, how)
	}
}
