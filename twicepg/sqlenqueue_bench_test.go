package twicepg

import (
	"context"
	"os"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/testkit/pgtest"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// BenchmarkEnqueueSQLvsGo enqueues single jobs, one at a time on an idle
// schema, through twice_enqueue on a connection of its own (autocommit)
// and through Go's Enqueue, and reports each one's latency percentiles.
// Run it with -benchtime=1000x for the 1,000 inserts each:
//
//	go test -run '^$' -bench EnqueueSQLvsGo -benchtime=1000x ./twicepg
func BenchmarkEnqueueSQLvsGo(b *testing.B) {
	if os.Getenv("TWICE_TEST_POSTGRES") == "" {
		b.Skip("TWICE_TEST_POSTGRES is not set")
	}
	ctx := context.Background()
	connString, _ := pgtest.Schema(b, "sqlbench")
	store, err := Open(ctx, connString)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { store.Close() })
	if err := store.CatalogPublish(ctx, &twicestore.CatalogPublishParams{Node: "bench",
		Kinds: []twicetype.KindInfo{{Kind: "sqlenq.ping.v1", Queue: "default", Args: twice.ArgFields(reflect.TypeFor[sqlPingArgs]())}}}); err != nil {
		b.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, connString)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close(context.Background()) })
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[sqlPingArgs](func(context.Context, *twice.Job[sqlPingArgs]) error { return nil }), nil)
	c, err := twice.NewClient(store, twice.Config{Registry: reg, Logger: discardLogger()})
	if err != nil {
		b.Fatal(err)
	}
	// The two paths alternate, one job each per round, so a load on the
	// shared machine falls on both alike.
	var sqlTook, goTook []time.Duration
	for i := 0; b.Loop(); i++ {
		start := time.Now()
		var id int64
		if err := conn.QueryRow(ctx, `SELECT twice_enqueue('sqlenq.ping.v1', jsonb_build_object('user_id', $1::bigint))`, i).Scan(&id); err != nil {
			b.Fatal(err)
		}
		sqlTook = append(sqlTook, time.Since(start))
		start = time.Now()
		if _, err := c.Enqueue(ctx, sqlPingArgs{UserID: int64(i)}, nil); err != nil {
			b.Fatal(err)
		}
		goTook = append(goTook, time.Since(start))
	}
	for _, m := range []struct {
		name string
		took []time.Duration
	}{{"sql", sqlTook}, {"go", goTook}} {
		p50, p99 := latencies(m.took)
		b.ReportMetric(float64(p50.Microseconds()), m.name+"-p50-µs")
		b.ReportMetric(float64(p99.Microseconds()), m.name+"-p99-µs")
	}
	b.ReportMetric(0, "ns/op") // a round is one job of each: the percentiles are the figures
}

// latencies returns the p50 and p99 of d.
func latencies(d []time.Duration) (p50, p99 time.Duration) {
	if len(d) == 0 {
		return 0, 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)*50/100], s[len(s)*99/100]
}
