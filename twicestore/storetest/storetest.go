// Package storetest is the conformance suite of the storage seam: every
// twicestore driver runs Run, unchanged, from its own tests, so the runtime
// can rely on the same semantics whatever database is underneath.
//
// A driver's test is a few lines:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) twicestore.Store {
//			s, err := twicesqlite.Open(t.Context(), filepath.Join(t.TempDir(), "twice.db"))
//			if err != nil {
//				t.Fatal(err)
//			}
//			t.Cleanup(func() { s.Close() })
//			return s
//		})
//	}
//
// The suite never sleeps: time passes by giving later Now and LeaseUntil
// values in the parameters. Times are compared at microsecond precision, the
// finest both SQLite and PostgreSQL keep.
//
// Beyond what the twicestore docs say, the suite pins these conventions:
//
//   - a zero CreatedAt on insert is the time of the insert, a zero RunAt is
//     CreatedAt, and nil Args are stored as an empty payload;
//   - a fetch with no kinds or a Limit of zero fetches nothing; a listing,
//     a rescue or a prune with a Limit of zero has no limit;
//   - fetch orders by priority ascending (1 runs before 2), then RunAt, then id;
//   - a rescue records an AttemptError mentioning the expired lease, whether
//     the job is requeued or dead;
//   - JobRetry leaves the lease epoch as it was, so fencing keeps working
//     across a retry;
//   - a JobFinish outcome in a state other than completed, available,
//     waiting, dead or cancelled is an error;
//   - a bulk action (JobRetry, JobDiscard, JobCancel, JobDelete) reports
//     every matched job and every unmatched id of Filter.IDs, by id; of
//     several matched jobs sharing a kind and unique key, JobRetry retries
//     the one with the lowest id and reports the others in conflict with
//     it; a second cancel of a running job keeps the first request;
//   - QueueList and QueueStranded order queues by the name's bytes; a pause
//     whose Until has passed reads as not paused;
//   - a kind is handled by a node when it is among the node's Kinds,
//     whatever the node's Queues;
//   - a zero At on ToggleSet is the time of the set, and ToggleList orders
//     by the kind's bytes, whatever the database's collation;
//   - a switch counts as expired once its ExpiresAt is at or before the
//     time it is judged at (ToggleListParams.Now, or the At of the next
//     change for the history's previous state); an expiry already past at
//     set time is stored, and the switch is absent at once;
//   - every ToggleSet and ToggleDelete appends one history row, a delete
//     of no switch included (none to none), and an empty Source is
//     recorded as ToggleSourceStore; ToggleHistory compares the kind
//     case-insensitively and lists every kind's changes for an empty one;
//   - the last CatalogPublish of a kind wins whatever its Now and node,
//     Node and LastSeen come from the publish, not from the kinds given,
//     and CatalogList orders by the kind's bytes; a kind's Limit reads back
//     as published, rate periods to the nanosecond;
//   - LimitOverrideList orders by scope (kinds before queues), then by the
//     name's bytes; every LimitOverrideSet and every LimitOverrideClear of
//     a stored override appends one history row, a clear of none appends
//     nothing; a zero At is the time of the change;
//   - ScheduleRemove leaves the jobs the schedule's ticks enqueued, and a
//     tick of a removed schedule fires as a first tick;
//   - ScheduleTick refuses a tick with no Name, a zero TickAt, an Outcome
//     other than ScheduleEnqueued or ScheduleSkipped, or a skipped tick
//     with a Job; a fired tick whose job's unique key an unfinished job holds
//     inserts nothing and returns (and records as LastJobID) that job; a zero
//     NextAt is stored as unset; ScheduleList orders by the name's bytes;
//   - ScheduleTicks lists only the ticks that fired (a skipped tick
//     included), newest first, at most ScheduleTicksKept of them;
//   - JobThroughput counts finished jobs in [Since, Until), buckets counted
//     from Since and listed only when not empty, and refuses a window with
//     no bucket; JobQueueStats lists only queues with available jobs;
//   - a fetch's Limits count a kind's running jobs wherever they run, a
//     per-key limit counts the key's running jobs and its unfinished jobs
//     of lower id, a rate window is (Now-Period, Now] on the fetches' Now;
//     a fetch that leased fewer than its Limit while due jobs of a limited
//     kind were left reports Throttled; LimitList reports every kind of
//     its Limits, by kind, with Keys and BusyKeys counted whatever the
//     limits;
//   - a job's Metadata reads back as inserted, and as empty when none was
//     given;
//   - IdempotencyBegin treats a record as expired only once ExpiresAt is
//     before Now, and a lock as stale only once LockedAt is before
//     Now-StaleAfter; a take-over keeps CreatedAt and takes the new
//     Fingerprint, LockedAt and ExpiresAt; a nil Header or Body reads back
//     as an empty one; IdempotencyPrune, unlike the other prunes, deletes
//     nothing with a Limit of zero;
//   - WorkflowPrune and BatchPrune with a Limit of zero look at every row
//     and return a Next of 0; ToggleHistoryPrune, LimitHistoryPrune and
//     NodePrune delete nothing with a zero cut-off.
package storetest

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// Run runs the conformance suite. newStore must return a fresh, migrated
// store that no other test uses (its own file or schema) and register its
// cleanup with t; Run calls it once per subtest, and subtests run in
// parallel.
func Run(t *testing.T, newStore func(t *testing.T) twicestore.Store) {
	groups := []struct {
		name  string
		tests []test
	}{
		{"Insert", insertTests},
		{"Fetch", fetchTests},
		{"Lease", leaseTests},
		{"Finish", finishTests},
		{"Unique", uniqueTests},
		{"Tx", txTests},
		{"Marker", markerTests},
		{"Admin", adminTests},
		{"Cancel", cancelTests},
		{"CancelPoll", cancelPollTests},
		{"Queue", queueTests},
		{"Stats", statsTests},
		{"Toggle", toggleTests},
		{"Schedule", scheduleTests},
		{"Idempotency", idempotencyTests},
		{"Node", nodeTests},
		{"Catalog", catalogTests},
		{"Limits", limitTests},
		{"LimitOverride", limitOverrideTests},
		{"Steps", stepTests},
		{"Replay", replayTests},
		{"Waits", waitTests},
		{"Unstorable", unstorableTests},
		{"Compose", composeTests},
		{"Trace", traceTests},
		{"Retention", retentionTests},
		{"Schema", schemaTests},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			for _, tc := range g.tests {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					tc.run(t, setup(t, newStore))
				})
			}
		})
	}
}

// test is one named conformance check.
type test struct {
	name string
	run  func(t *testing.T, e *env)
}

// env is the bundle a check works with: a fresh store and a fixed clock.
type env struct {
	t   *testing.T
	ctx context.Context
	s   twicestore.Store
	// base is "now" for the check; later times are base.Add(...). It has
	// microsecond precision so stored times compare equal.
	base time.Time
}

func setup(t *testing.T, newStore func(t *testing.T) twicestore.Store) *env {
	t.Helper()
	return &env{
		t:    t,
		ctx:  t.Context(),
		s:    newStore(t),
		base: time.Date(2031, 3, 4, 5, 6, 7, 891011000, time.UTC),
	}
}

// at returns the base time moved by d.
func (e *env) at(d time.Duration) time.Time { return e.base.Add(d) }

// job returns insert parameters with every field set, due at base.
func (e *env) job(kind string) *twicestore.JobInsertParams {
	return &twicestore.JobInsertParams{
		Kind:          kind,
		Queue:         "default",
		Priority:      1,
		Args:          []byte(`{"n":1}`),
		MessageID:     uuid.NewString(),
		Key:           "key-" + uuid.NewString(),
		CorrelationID: "corr-" + uuid.NewString(),
		MaxAttempts:   3,
		RunAt:         e.base,
		CreatedAt:     e.base,
	}
}

// insert inserts jobs and fails the test on error.
func (e *env) insert(jobs ...*twicestore.JobInsertParams) []*twicestore.JobInsertResult {
	e.t.Helper()
	return insertWith(e.t, e.ctx, e.s, jobs...)
}

func insertWith(t *testing.T, ctx context.Context, ex twicestore.Executor, jobs ...*twicestore.JobInsertParams) []*twicestore.JobInsertResult {
	t.Helper()
	res, err := ex.JobInsertMany(ctx, &twicestore.JobInsertManyParams{Jobs: jobs})
	if err != nil {
		t.Fatalf("JobInsertMany: %v", err)
	}
	if len(res.Jobs) != len(jobs) {
		t.Fatalf("JobInsertMany returned %d results for %d jobs", len(res.Jobs), len(jobs))
	}
	return res.Jobs
}

// insertOne inserts one job and returns its row.
func (e *env) insertOne(p *twicestore.JobInsertParams) *twicetype.JobRow {
	e.t.Helper()
	return e.insert(p)[0].Job
}

// fetch leases up to limit jobs of kinds from queue "default" for node,
// at now, with a lease of one minute.
func (e *env) fetch(now time.Time, limit int, node string, kinds ...string) []*twicetype.JobRow {
	e.t.Helper()
	return e.fetchWith(&twicestore.JobFetchParams{
		Queue: "default", Kinds: kinds, Limit: limit, Node: node,
		Now: now, LeaseUntil: now.Add(time.Minute),
	})
}

func (e *env) fetchWith(p *twicestore.JobFetchParams) []*twicetype.JobRow {
	e.t.Helper()
	res, err := e.s.JobFetch(e.ctx, p)
	if err != nil {
		e.t.Fatalf("JobFetch: %v", err)
	}
	return res.Jobs
}

// fetchOne fetches exactly one job of kind, due at now.
func (e *env) fetchOne(now time.Time, kind string) *twicetype.JobRow {
	e.t.Helper()
	jobs := e.fetch(now, 1, "node-a", kind)
	if len(jobs) != 1 {
		e.t.Fatalf("fetch %s at %s: got %d jobs, want 1", kind, now, len(jobs))
	}
	return jobs[0]
}

func (e *env) get(id int64) *twicetype.JobRow {
	e.t.Helper()
	j, err := e.s.JobGet(e.ctx, &twicestore.JobGetParams{ID: id})
	if err != nil {
		e.t.Fatalf("JobGet(%d): %v", id, err)
	}
	return j
}

func (e *env) finish(outcomes ...*twicestore.JobOutcome) []bool {
	e.t.Helper()
	res, err := e.s.JobFinish(e.ctx, &twicestore.JobFinishParams{Outcomes: outcomes})
	if err != nil {
		e.t.Fatalf("JobFinish: %v", err)
	}
	if len(res.Applied) != len(outcomes) {
		e.t.Fatalf("JobFinish returned %d results for %d outcomes", len(res.Applied), len(outcomes))
	}
	return res.Applied
}

// complete finishes a fetched job as completed and fails unless applied.
func (e *env) complete(j *twicetype.JobRow, at time.Time) {
	e.t.Helper()
	if applied := e.finish(&twicestore.JobOutcome{ID: j.ID, Epoch: j.Epoch,
		State: twicetype.JobStateCompleted, FinishedAt: at}); !applied[0] {
		e.t.Fatalf("completing job %d (epoch %d) was not applied", j.ID, j.Epoch)
	}
}

// kill fetches the job of kind and dead-letters it with one error.
func (e *env) kill(kind string, at time.Time) *twicetype.JobRow {
	e.t.Helper()
	j := e.fetchOne(at, kind)
	if applied := e.finish(&twicestore.JobOutcome{ID: j.ID, Epoch: j.Epoch, State: twicetype.JobStateDead,
		FinishedAt: at, Error: &twicetype.AttemptError{Attempt: j.Attempt, At: at, Error: "boom"}}); !applied[0] {
		e.t.Fatalf("dead-lettering job %d was not applied", j.ID)
	}
	return e.get(j.ID)
}

func (e *env) claim(handler, key string, at time.Time) bool {
	e.t.Helper()
	res, err := e.s.MarkerClaim(e.ctx, &twicestore.MarkerParams{Handler: handler, Key: key, Now: at})
	if err != nil {
		e.t.Fatalf("MarkerClaim(%q, %q): %v", handler, key, err)
	}
	return res.AlreadyProcessed
}

func (e *env) peek(handler, key string) bool {
	e.t.Helper()
	res, err := e.s.MarkerPeek(e.ctx, &twicestore.MarkerParams{Handler: handler, Key: key})
	if err != nil {
		e.t.Fatalf("MarkerPeek(%q, %q): %v", handler, key, err)
	}
	return res.Processed
}

// checkJob fails the test with every field of got that differs from want.
func checkJob(t *testing.T, what string, got, want *twicetype.JobRow) {
	t.Helper()
	for _, d := range diffJob(got, want) {
		t.Errorf("%s: %s", what, d)
	}
}

func diffJob(got, want *twicetype.JobRow) []string {
	if got == nil || want == nil {
		if got != want {
			return []string{fmt.Sprintf("got %v, want %v", got, want)}
		}
		return nil
	}
	var d []string
	ne := func(field string, g, w any) {
		d = append(d, fmt.Sprintf("%s = %v, want %v", field, g, w))
	}
	if got.ID != want.ID {
		ne("ID", got.ID, want.ID)
	}
	if got.Kind != want.Kind {
		ne("Kind", got.Kind, want.Kind)
	}
	if got.Queue != want.Queue {
		ne("Queue", got.Queue, want.Queue)
	}
	if got.Priority != want.Priority {
		ne("Priority", got.Priority, want.Priority)
	}
	if !bytes.Equal(got.Args, want.Args) {
		ne("Args", fmt.Sprintf("%q", got.Args), fmt.Sprintf("%q", want.Args))
	}
	if got.MessageID != want.MessageID {
		ne("MessageID", got.MessageID, want.MessageID)
	}
	if got.Key != want.Key {
		ne("Key", got.Key, want.Key)
	}
	if got.CorrelationID != want.CorrelationID {
		ne("CorrelationID", got.CorrelationID, want.CorrelationID)
	}
	if got.UniqueKey != want.UniqueKey {
		ne("UniqueKey", got.UniqueKey, want.UniqueKey)
	}
	if got.State != want.State {
		ne("State", got.State, want.State)
	}
	if got.Attempt != want.Attempt {
		ne("Attempt", got.Attempt, want.Attempt)
	}
	if got.MaxAttempts != want.MaxAttempts {
		ne("MaxAttempts", got.MaxAttempts, want.MaxAttempts)
	}
	if got.Epoch != want.Epoch {
		ne("Epoch", got.Epoch, want.Epoch)
	}
	if !got.RunAt.Equal(want.RunAt) {
		ne("RunAt", got.RunAt, want.RunAt)
	}
	if !got.LeaseUntil.Equal(want.LeaseUntil) {
		ne("LeaseUntil", got.LeaseUntil, want.LeaseUntil)
	}
	if got.AttemptedBy != want.AttemptedBy {
		ne("AttemptedBy", got.AttemptedBy, want.AttemptedBy)
	}
	if !slices.EqualFunc(got.Errors, want.Errors, func(a, b twicetype.AttemptError) bool {
		return a.Attempt == b.Attempt && a.At.Equal(b.At) && a.Error == b.Error && a.Stack == b.Stack
	}) {
		ne("Errors", got.Errors, want.Errors)
	}
	if got.Note != want.Note {
		ne("Note", got.Note, want.Note)
	}
	if !got.CreatedAt.Equal(want.CreatedAt) {
		ne("CreatedAt", got.CreatedAt, want.CreatedAt)
	}
	if !got.FinishedAt.Equal(want.FinishedAt) {
		ne("FinishedAt", got.FinishedAt, want.FinishedAt)
	}
	if got.Snoozes != want.Snoozes {
		ne("Snoozes", got.Snoozes, want.Snoozes)
	}
	if (got.Cancel == nil) != (want.Cancel == nil) || got.Cancel != nil && (!got.Cancel.At.Equal(want.Cancel.At) ||
		got.Cancel.By != want.Cancel.By || got.Cancel.Reason != want.Cancel.Reason) {
		ne("Cancel", got.Cancel, want.Cancel)
	}
	return d
}

// ids returns the ids of jobs, in order.
func ids(jobs []*twicetype.JobRow) []int64 {
	out := make([]int64, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	return out
}

// sorted returns a sorted copy of s, for comparing sets of ids.
func sorted(s []int64) []int64 {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
