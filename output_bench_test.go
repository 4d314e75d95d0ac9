package twice_test

import (
	"context"
	"os"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/testkit/pgtest"
	"github.com/twicejobs/twice/twicepg"
	"github.com/twicejobs/twice/twicestore"
)

// BenchmarkWait measures Client.Wait, one job at a time: "roundtrip" is
// EnqueueAndWait from enqueue to Wait's return, "wake" the part from the
// handler's return to Wait's return (the completion's write, its commit,
// the notification or poll, and the read of the output). p50/p99 are
// reported in milliseconds. PostgreSQL is woken by NOTIFY, SQLite polls.
func BenchmarkWait(b *testing.B) {
	stores := map[string]func(b *testing.B) twicestore.Store{
		"sqlite": func(b *testing.B) twicestore.Store { return newStore(b) },
	}
	if os.Getenv(pgtest.EnvURL) != "" {
		stores["postgres"] = func(b *testing.B) twicestore.Store {
			u, _ := pgtest.Schema(b, "bench_wait")
			s, err := twicepg.Open(context.Background(), u)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = s.Close() })
			return s
		}
	}
	for _, name := range []string{"sqlite", "postgres"} {
		open, ok := stores[name]
		if !ok {
			continue
		}
		b.Run(name, func(b *testing.B) {
			var returned atomic.Int64 // the handler's return, unix nanoseconds
			reg := twice.NewRegistry()
			twice.MustRegister(reg, twice.HandlerFunc[sumArgs](func(ctx context.Context, job *twice.Job[sumArgs]) error {
				err := twice.RecordOutput(ctx, sumResult{Sum: job.Args.A + job.Args.B})
				returned.Store(time.Now().UnixNano())
				return err
			}), &twice.KindOpts{Strategy: twice.None})
			cfg := testConfig(reg)
			cfg.PollInterval = time.Second // the job is woken by the enqueue (in this process) or its notification
			client := startClient(b, open(b), cfg)
			ctx := context.Background()
			roundtrip, wake := make([]time.Duration, 0, b.N), make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := range b.N {
				start := time.Now()
				res, err := client.EnqueueAndWait(ctx, sumArgs{A: i, B: 1}, nil)
				end := time.Now()
				if err != nil {
					b.Fatal(err)
				}
				var out sumResult
				if err := res.Decode(&out); err != nil || out.Sum != i+1 {
					b.Fatalf("output %+v, %v", out, err)
				}
				roundtrip = append(roundtrip, end.Sub(start))
				wake = append(wake, end.Sub(time.Unix(0, returned.Load())))
			}
			b.StopTimer()
			for _, m := range []struct {
				name string
				ds   []time.Duration
			}{{"roundtrip", roundtrip}, {"wake", wake}} {
				slices.Sort(m.ds)
				b.ReportMetric(ms(m.ds[len(m.ds)/2]), m.name+"_p50_ms")
				b.ReportMetric(ms(m.ds[len(m.ds)*99/100]), m.name+"_p99_ms")
			}
		})
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
