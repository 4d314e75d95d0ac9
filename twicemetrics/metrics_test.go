package twicemetrics_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/testkit/waitfor"
	"github.com/twicejobs/twice/twicemetrics"
	"github.com/twicejobs/twice/twicesqlite"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type okArgs struct{ ID int }

func (okArgs) Kind() string             { return "metrics.ok.v1" }
func (a okArgs) IdempotencyKey() string { return strconv.Itoa(a.ID) }

type boomArgs struct{}

func (boomArgs) Kind() string { return "metrics.boom.v1" }

func TestMetrics(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	store, err := twicesqlite.Open(ctx, filepath.Join(t.TempDir(), "twice.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[okArgs](func(context.Context, *twice.Job[okArgs]) error { return nil }), nil)
	twice.MustRegister(reg, twice.HandlerFunc[boomArgs](func(context.Context, *twice.Job[boomArgs]) error {
		return errors.New("boom")
	}), &twice.KindOpts{MaxAttempts: 2, Queue: twice.QueueBulk})
	m := twicemetrics.New(store)
	client, err := twice.NewClient(store, twice.Config{
		Registry: reg, Observer: m, PollInterval: 20 * time.Millisecond,
		Backoff: func(int) time.Duration { return time.Millisecond },
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		client.Stop(sctx)
	}()

	settle := func(id int64) {
		t.Helper()
		var j *twicetype.JobRow
		waitfor.Cond(t, fmt.Sprintf("job %d to finish", id), func() bool {
			var err error
			if j, err = store.JobGet(ctx, &twicestore.JobGetParams{ID: id}); err != nil {
				t.Fatal(err)
			}
			return j.State.Finished()
		}, func() string { return string(j.State) })
	}
	for _, args := range []twice.Args{okArgs{ID: 1}, okArgs{ID: 2}, okArgs{ID: 1}, boomArgs{}} {
		res, err := client.Enqueue(ctx, args, nil)
		if err != nil {
			t.Fatal(err)
		}
		settle(res.Job.ID)
	}
	// A job no worker handles: orphaned, and in the queue's depth.
	_, err = store.JobInsertMany(ctx, &twicestore.JobInsertManyParams{Jobs: []*twicestore.JobInsertParams{{
		Kind: "metrics.orphan.v1", Queue: "default", MessageID: "m1", Key: "k1", MaxAttempts: 1, Args: []byte(`{}`),
		RunAt: time.Now().Add(-time.Minute),
	}}})
	if err != nil {
		t.Fatal(err)
	}
	// A job of a handled kind in a queue no worker serves: stranded. And a
	// paused queue: paused, not stuck.
	if _, err := client.Enqueue(ctx, okArgs{ID: 9}, &twice.EnqueueOpts{Queue: "nightly"}); err != nil {
		t.Fatal(err)
	}
	if err := client.QueuePause(ctx, &twice.QueuePauseParams{Queue: twice.QueueBulk, Reason: "metrics test"}); err != nil {
		t.Fatal(err)
	}

	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	ok, boom := `kind="metrics.ok.v1",queue="default"`, `kind="metrics.boom.v1",queue="bulk"`
	for _, want := range []string{
		`twice_jobs_enqueued_total{` + ok + `} 3`,
		`twice_jobs_started_total{` + ok + `} 3`,
		`twice_jobs_completed_total{` + ok + `} 3`,
		`twice_jobs_duplicates_total{` + ok + `} 1`,
		`twice_jobs_enqueued_total{` + boom + `} 1`,
		`twice_jobs_retried_total{` + boom + `} 1`,
		`twice_jobs_dead_total{` + boom + `} 1`,
		`twice_job_run_seconds_count{` + boom + `} 2`,
		`twice_job_wait_seconds_count{` + ok + `} 3`,
		`twice_job_fetch_to_start_seconds_count{` + boom + `} 2`, // every attempt, not only the first
		`twice_queue_depth{queue="default"} 1`,
		`twice_orphaned_jobs{kind="metrics.orphan.v1",queue="default"} 1`,
		`twice_stranded_jobs{queue="nightly"} 1`,
		`twice_queue_paused{queue="bulk"} 1`,
		`twice_queue_paused{queue="default"} 0`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("metrics lack %q", want)
		}
	}
	age := regexp.MustCompile(`twice_queue_oldest_age_seconds\{queue="default"\} ([0-9.e+]+)`).FindStringSubmatch(body)
	if age == nil {
		t.Fatalf("no oldest age for the default queue in:\n%s", body)
	}
	if v, _ := strconv.ParseFloat(age[1], 64); v < 60 {
		t.Errorf("oldest age %s s, want at least 60 (the orphan was due a minute ago)", age[1])
	}
	if t.Failed() {
		fmt.Println(body)
	}
}

type limitedArgs struct {
	Tenant string `json:"tenant"`
}

func (limitedArgs) Kind() string { return "metrics.limited.v1" }

// TestMetricsLimits: with ReportLimits, a scrape reports the due jobs a
// limit holds back as throttled, the slots in use and the slot limit, by
// kind. Nothing runs here: the client only enqueues, so the numbers are
// the store's as enqueued.
func TestMetricsLimits(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	store, err := twicesqlite.Open(ctx, filepath.Join(t.TempDir(), "twice.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[limitedArgs](func(context.Context, *twice.Job[limitedArgs]) error { return nil }),
		&twice.KindOpts{GlobalConcurrency: 2, KeyConcurrency: 1, ConcurrencyKey: "tenant",
			RateLimit: twice.RateLimit{Limit: 10, Period: time.Second}})
	m := twicemetrics.New(store)
	client, err := twice.NewClient(store, twice.Config{Registry: reg, Observer: m,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	m.ReportLimits(client)
	for _, tenant := range []string{"a", "a", "b", "c"} {
		if _, err := client.Enqueue(ctx, limitedArgs{Tenant: tenant}, nil); err != nil {
			t.Fatal(err)
		}
	}
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	const kind = `{kind="metrics.limited.v1"}`
	for _, want := range []string{
		// 4 due: a's second waits for a; of a, b and c two may start.
		`twice_jobs_throttled` + kind + ` 2`,
		`twice_limit_slots_used` + kind + ` 0`,
		`twice_limit_slots` + kind + ` 2`,
		`twice_limit_rate_used` + kind + ` 0`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("metrics lack %q", want)
		}
	}
	if t.Failed() {
		fmt.Println(body)
	}
}
