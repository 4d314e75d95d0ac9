package twice_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/testkit/pgtest"
	"github.com/twicejobs/twice/internal/testkit/waitfor"
	"github.com/twicejobs/twice/twicepg"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

type (
	benchReplayAfter  struct{ N int }
	benchReplayBefore struct{ N int }
)

func (benchReplayAfter) Kind() string  { return "bench.replay-after.v1" }
func (benchReplayBefore) Kind() string { return "bench.replay-before.v1" }

// BenchmarkReplay is issue 25's replay proof at full scale on PostgreSQL,
// through the client as an operator runs it: 10,000 completed ClaimAfter
// jobs whose markers exist, 100 completed ClaimBefore jobs holding their
// own claims (a replay of such a job is uncertain: the runtime would
// take the claim for an interrupted effect) and 50 completed unique jobs
// whose keys newer waiting jobs hold. One op is the preview of state
// completed (which must say 10,000 no-op / 100 uncertain / 50 blocked), the
// real JobRetry of state completed, and a worker draining the replayed
// jobs. It reports each step's seconds and the handlers' effect calls
// during the op (which must be 0). The jobs are built through the storage
// seam as workers leave them, outside the timer. Run it with -benchtime=1x.
func BenchmarkReplay(b *testing.B) {
	if os.Getenv(pgtest.EnvURL) == "" {
		b.Skip(pgtest.EnvURL + " is not set")
	}
	noops, uncertain, blocked := 10_000, 100, 50
	if testing.Short() {
		noops, uncertain, blocked = 100, 10, 5 // a smoke run: that it works, not how fast
	}
	var preview, replay, drain time.Duration
	var effects int64
	for range b.N {
		b.StopTimer()
		u, _ := pgtest.Schema(b, "bench_replay")
		s, err := twicepg.Open(context.Background(), u)
		if err != nil {
			b.Fatal(err)
		}
		rb := newReplayBench(b, s)
		rb.build(noops, uncertain, blocked)
		b.StartTimer()

		p, r, d, e := rb.run(noops, uncertain, blocked)
		preview, replay, drain, effects = preview+p, replay+r, drain+d, effects+e
		b.StopTimer()
		_ = s.Close() // one pool per op: many ops must not hold the server's connections
	}
	n := float64(b.N)
	b.ReportMetric(preview.Seconds()/n, "preview-s")
	b.ReportMetric(replay.Seconds()/n, "replay-s")
	b.ReportMetric(drain.Seconds()/n, "drain-s")
	b.ReportMetric(float64(effects)/n, "effect-calls")
}

// replayBench is one database with the proof's jobs, and the handlers'
// effect calls.
type replayBench struct {
	b       *testing.B
	s       twicestore.Store
	reg     *twice.Registry
	effects atomic.Int64
	now     time.Time
}

func newReplayBench(b *testing.B, s twicestore.Store) *replayBench {
	rb := &replayBench{b: b, s: s, reg: twice.NewRegistry(), now: time.Now()}
	twice.MustRegister(rb.reg, twice.HandlerFunc[benchReplayAfter](func(context.Context, *twice.Job[benchReplayAfter]) error {
		rb.effects.Add(1)
		return nil
	}), nil)
	twice.MustRegister(rb.reg, twice.HandlerFunc[benchReplayBefore](func(context.Context, *twice.Job[benchReplayBefore]) error {
		rb.effects.Add(1)
		return nil
	}), &twice.KindOpts{Strategy: twice.ClaimBefore})
	return rb
}

// build inserts and completes the jobs as workers would have: the
// ClaimAfter ones with their markers claimed by their completion, the
// ClaimBefore ones with their own claims, and then the jobs holding the
// unique keys of the blocked ones (completed outside their unique states,
// they held them no longer).
func (rb *replayBench) build(noops, uncertain, blocked int) {
	after, before := benchReplayAfter{}.Kind(), benchReplayBefore{}.Kind()
	rb.complete(after, noops, "", false)
	rb.complete(before, uncertain, "", true)
	rb.complete(after, blocked, "u", false)
	holders := make([]*twicestore.JobInsertParams, blocked)
	for i := range holders {
		holders[i] = rb.job(after, fmt.Sprint("holder-", i))
		holders[i].UniqueKey, holders[i].RunAt = fmt.Sprint("u-", i), rb.now.Add(time.Hour)
	}
	if _, err := rb.s.JobInsertMany(context.Background(), &twicestore.JobInsertManyParams{Jobs: holders}); err != nil {
		rb.b.Fatal(err)
	}
}

func (rb *replayBench) job(kind, key string) *twicestore.JobInsertParams {
	return &twicestore.JobInsertParams{Kind: kind, Queue: twice.QueueDefault, Args: []byte(`{"N":1}`), MaxAttempts: 3,
		Key: key, RunAt: rb.now, CreatedAt: rb.now}
}

// complete inserts n jobs of kind (unique, with keys unique-i, when unique
// is set), fetches them a page at a time and completes them, claiming each
// marker with the completion, or, for a ClaimBefore kind (claimBefore),
// before it.
func (rb *replayBench) complete(kind string, n int, unique string, claimBefore bool) {
	ctx := context.Background()
	const page = 1000
	for from := 0; from < n; from += page {
		jobs := make([]*twicestore.JobInsertParams, min(page, n-from))
		for i := range jobs {
			jobs[i] = rb.job(kind, fmt.Sprintf("%s-%s-%d", kind, unique, from+i))
			if unique != "" {
				jobs[i].UniqueKey = fmt.Sprint(unique, "-", from+i)
			}
		}
		if _, err := rb.s.JobInsertMany(ctx, &twicestore.JobInsertManyParams{Jobs: jobs}); err != nil {
			rb.b.Fatal(err)
		}
		res, err := rb.s.JobFetch(ctx, &twicestore.JobFetchParams{Queue: twice.QueueDefault, Kinds: []string{kind},
			Limit: len(jobs), Node: "bench", Now: rb.now, LeaseUntil: rb.now.Add(time.Hour)})
		if err != nil || len(res.Jobs) != len(jobs) {
			rb.b.Fatalf("fetched %d jobs of %s (%v), want %d", len(res.Jobs), kind, err, len(jobs))
		}
		outcomes := make([]*twicestore.JobOutcome, len(res.Jobs))
		for i, j := range res.Jobs {
			m := &twicestore.MarkerParams{Handler: kind, Key: j.Key, Now: rb.now, JobID: j.ID, Epoch: j.Epoch}
			outcomes[i] = &twicestore.JobOutcome{ID: j.ID, Epoch: j.Epoch, State: twicetype.JobStateCompleted, FinishedAt: rb.now}
			if !claimBefore {
				outcomes[i].Marker = m
			} else if _, err := rb.s.MarkerClaim(ctx, m); err != nil {
				rb.b.Fatal(err)
			}
		}
		if _, err := rb.s.JobFinish(ctx, &twicestore.JobFinishParams{Outcomes: outcomes}); err != nil {
			rb.b.Fatal(err)
		}
	}
}

// run previews and replays the completed jobs, then drains the replayed
// ones with a worker, checking each step does what the proof says.
func (rb *replayBench) run(noops, uncertain, blocked int) (preview, replay, drain time.Duration, effects int64) {
	ctx := context.Background()
	cfg := twice.Config{Registry: rb.reg, Logger: discardLogger(), PollInterval: time.Second,
		Queues: []twice.QueueConfig{{Name: twice.QueueDefault, Concurrency: 50}}}
	admin, err := twice.NewClient(rb.s, cfg)
	if err != nil {
		rb.b.Fatal(err)
	}
	completed := &twice.JobFilter{State: twicetype.JobStateCompleted}
	t0 := time.Now()
	pv, err := admin.JobRetryPreview(ctx, &twice.JobActionParams{Filter: completed})
	if err != nil {
		rb.b.Fatal(err)
	}
	preview = time.Since(t0)
	if pv.Counts[twice.ReplayNoop] != noops || pv.Counts[twice.ReplayUncertain] != uncertain ||
		pv.Counts[twice.ReplayBlocked] != blocked || pv.Total != noops+uncertain+blocked {
		rb.b.Fatalf("preview counts %v of %d, want %d no-op, %d uncertain, %d blocked", pv.Counts, pv.Total, noops, uncertain, blocked)
	}

	t0 = time.Now()
	res, err := admin.JobRetry(ctx, &twice.JobActionParams{Filter: completed, By: "bench"})
	if err != nil {
		rb.b.Fatal(err)
	}
	replay = time.Since(t0)
	if n := len(res.Changed()); n != noops {
		rb.b.Fatalf("replayed %d jobs, want the %d no-ops", n, noops)
	}

	t0 = time.Now()
	worker, err := twice.NewClient(rb.s, cfg)
	if err != nil {
		rb.b.Fatal(err)
	}
	if err := worker.Start(ctx); err != nil {
		rb.b.Fatal(err)
	}
	defer func() { _ = worker.Shutdown(ctx, 10*time.Second) }()
	waitfor.CondWithin(rb.b, 10*time.Minute, "the replayed jobs to complete again", func() bool {
		c, err := rb.s.JobCount(ctx, &twicestore.JobCountParams{Filter: twicestore.JobFilter{State: twicetype.JobStateCompleted}})
		if err != nil {
			rb.b.Fatal(err)
		}
		n := 0
		for _, k := range c.Counts {
			n += k.Count
		}
		return n == noops+uncertain+blocked
	}, nil)
	drain = time.Since(t0)
	return preview, replay, drain, rb.effects.Load()
}
