package twice_test

import (
	"context"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/testkit/pgtest"
	"github.com/twicejobs/twice/twicepg"
	"github.com/twicejobs/twice/twicestore"
)

// Benchmark kinds: a chain whose steps enqueue the next as a continuation
// (Then) or as a plain job (Client.Enqueue from the handler), and a parent
// that fans out to leaves either way.
type (
	benchChainThen    struct{ Left int }
	benchChainEnqueue struct{ Left int }
	benchFanThen      struct{ N int }
	benchFanEnqueue   struct{ N int }
	benchLeaf         struct{ I int }
)

func (benchChainThen) Kind() string    { return "bench.chain-then.v1" }
func (benchChainEnqueue) Kind() string { return "bench.chain-enqueue.v1" }
func (benchFanThen) Kind() string      { return "bench.fan-then.v1" }
func (benchFanEnqueue) Kind() string   { return "bench.fan-enqueue.v1" }
func (benchLeaf) Kind() string         { return "bench.leaf.v1" }

// edgeBench is one client with every benchmark kind registered; done is
// signalled when the last job of a run has been handled.
type edgeBench struct {
	c      *twice.Client
	done   chan struct{}
	leaves atomic.Int64
	want   atomic.Int64
	once   *sync.Once
}

func newEdgeBench(b *testing.B, s twicestore.Store) *edgeBench {
	eb := &edgeBench{done: make(chan struct{}), once: &sync.Once{}}
	reg := twice.NewRegistry()
	finish := func() { eb.once.Do(func() { close(eb.done) }) }
	twice.MustRegister(reg, twice.HandlerFunc[benchChainThen](func(_ context.Context, j *twice.Job[benchChainThen]) error {
		if j.Args.Left == 0 {
			finish()
			return nil
		}
		return j.Then(benchChainThen{j.Args.Left - 1}, nil)
	}), &twice.KindOpts{Strategy: twice.None})
	twice.MustRegister(reg, twice.HandlerFunc[benchChainEnqueue](func(ctx context.Context, j *twice.Job[benchChainEnqueue]) error {
		if j.Args.Left == 0 {
			finish()
			return nil
		}
		_, err := eb.c.Enqueue(ctx, benchChainEnqueue{j.Args.Left - 1}, nil)
		return err
	}), &twice.KindOpts{Strategy: twice.None})
	twice.MustRegister(reg, twice.HandlerFunc[benchFanThen](func(_ context.Context, j *twice.Job[benchFanThen]) error {
		for i := range j.Args.N {
			if err := j.Then(benchLeaf{i}, nil); err != nil {
				return err
			}
		}
		return nil
	}), &twice.KindOpts{Strategy: twice.None})
	twice.MustRegister(reg, twice.HandlerFunc[benchFanEnqueue](func(ctx context.Context, j *twice.Job[benchFanEnqueue]) error {
		ps := make([]twice.EnqueueParams, j.Args.N)
		for i := range ps {
			ps[i] = twice.EnqueueParams{Args: benchLeaf{i}}
		}
		_, err := eb.c.EnqueueMany(ctx, ps)
		return err
	}), &twice.KindOpts{Strategy: twice.None})
	twice.MustRegister(reg, twice.HandlerFunc[benchLeaf](func(context.Context, *twice.Job[benchLeaf]) error {
		if eb.leaves.Add(1) == eb.want.Load() {
			finish()
		}
		return nil
	}), &twice.KindOpts{Strategy: twice.None})
	cfg := twice.Config{Registry: reg, Logger: discardLogger(), PollInterval: time.Second,
		Queues: []twice.QueueConfig{{Name: twice.QueueDefault, Concurrency: 20}}}
	eb.c = startClient(b, s, cfg)
	return eb
}

// run enqueues start and waits for the run's last job; it returns the
// time taken.
func (eb *edgeBench) run(b *testing.B, start twice.Args, leaves int) time.Duration {
	eb.done, eb.once = make(chan struct{}), &sync.Once{}
	eb.leaves.Store(0)
	eb.want.Store(int64(leaves))
	t0 := time.Now()
	if _, err := eb.c.Enqueue(context.Background(), start, nil); err != nil {
		b.Fatal(err)
	}
	select {
	case <-eb.done:
	case <-time.After(10 * time.Minute):
		b.Fatal("run did not finish in 10 minutes")
	}
	return time.Since(t0)
}

// BenchmarkEdges compares a continuation edge with a plain job enqueued by
// the handler, side by side: a chain of edgeBenchN steps (each step's job
// enqueues the next) and a fan-out of one job to edgeBenchN children. The
// then/enqueue ratio of jobs/s is the edge's cost (the target: an edge
// costs at most 20 % over a plain job). Run it with -benchtime=1x: one op
// is a whole chain or fan-out.
func BenchmarkEdges(b *testing.B) {
	n := 10_000
	if testing.Short() {
		n = 100 // a smoke run (.ci/run): that it works, not how fast
	}
	stores := []struct {
		name string
		open func(b *testing.B) twicestore.Store
	}{{"sqlite", func(b *testing.B) twicestore.Store { return newStore(b) }}}
	if os.Getenv(pgtest.EnvURL) != "" {
		stores = append(stores, struct {
			name string
			open func(b *testing.B) twicestore.Store
		}{"postgres", func(b *testing.B) twicestore.Store {
			u, _ := pgtest.Schema(b, "bench_edges")
			s, err := twicepg.Open(context.Background(), u)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = s.Close() })
			return s
		}})
	}
	cases := []struct {
		name   string
		start  twice.Args
		leaves int
	}{
		{"chain/enqueue", benchChainEnqueue{n - 1}, 0},
		{"chain/then", benchChainThen{n - 1}, 0},
		{"fanout/enqueue", benchFanEnqueue{n}, n},
		{"fanout/then", benchFanThen{n}, n},
	}
	for _, st := range stores {
		for _, tc := range cases {
			b.Run(st.name+"/"+tc.name, func(b *testing.B) {
				eb := newEdgeBench(b, st.open(b))
				var took time.Duration
				for b.Loop() {
					took += eb.run(b, tc.start, tc.leaves)
				}
				b.ReportMetric(float64(n*b.N)/took.Seconds(), "jobs/s")
			})
		}
	}
}
