package clustertest

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/testkit/nodetest"
	"github.com/twicejobs/twice/internal/testkit/waitfor"
	"github.com/twicejobs/twice/twicecli"
)

// gatedArgs is a job of a kind compiled with a global limit of 1, whose
// handler holds until the test opens the gate.
type gatedArgs struct{ N int64 }

func (gatedArgs) Kind() string { return "cluster.gated.v1" }

// gateLock is the advisory lock of the gate: the test holds it
// exclusively to close the gate; a handler takes it shared, so it waits
// while the gate is closed and passes at once when it is open. It is keyed
// by the schema, so the tests of other schemas do not share it.
const gateLock = `hashtextextended('twice.clustertest.gate ' || current_schema(), 0)`

// registerGated adds the gated kind (envLimits "gated"). Its handler
// writes its start and end to limit_log on the database's clock, as the
// other limited kinds' do.
func registerGated(reg *twice.Registry, db database) {
	record := func(ctx context.Context, jobID int64, event string) error {
		return db.Exec(ctx, `INSERT INTO limit_log (job_id, conc_key, event, node, at)
			VALUES ($1, '', $2, $3, `+db.Dialect().now+`)`, jobID, event, os.Getenv(envNode))
	}
	twice.MustRegister(reg, twice.HandlerFunc[gatedArgs](func(ctx context.Context, job *twice.Job[gatedArgs]) error {
		if err := record(ctx, job.ID, "start"); err != nil {
			return err
		}
		if err := db.Exec(ctx, `SELECT pg_advisory_xact_lock_shared(`+gateLock+`)`); err != nil {
			return err
		}
		return record(ctx, job.ID, "end")
	}), &twice.KindOpts{Strategy: twice.None, MaxAttempts: 50, GlobalConcurrency: 1})
}

// TestClusterLimitChangedAtRuntime: three worker processes run a kind
// compiled with a global limit of 1. A client that registers no kind (the
// stock CLI's view) sees the limit through the catalog, raises it to 3,
// and three jobs run at once, every worker logging the override; lowered
// back to 1, once the held jobs finish the next ones start one at a time;
// the limit history, through the stock CLI, says who changed what and
// why. The time from the raise to the first start under it is logged, not
// asserted: it is the NOTIFY's path on this machine.
func TestClusterLimitChangedAtRuntime(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test skipped in -short mode")
	}
	onEachBackend(t, testLimitChangedAtRuntime)
}

func testLimitChangedAtRuntime(t *testing.T, b *backend) {
	postgresOnly(t, b, "the gate that holds every handler is a shared advisory lock, and MySQL's named locks (GET_LOCK) are exclusive only; the overrides themselves are in the conformance suite's LimitOverride group, which runs on MariaDB")
	const jobs = 8
	c := newCluster(t, b)
	ctx := context.Background()
	c.createLimitLog()
	pool := c.admin.(pgDatabase).pool
	gate, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer gate.Release()
	if _, err := gate.Exec(ctx, `SELECT pg_advisory_lock(`+gateLock+`)`); err != nil {
		t.Fatal(err)
	}
	gateOpen := false
	openGate := func() {
		if !gateOpen {
			gateOpen = true
			if _, err := gate.Exec(ctx, `SELECT pg_advisory_unlock(`+gateLock+`)`); err != nil {
				t.Fatal(err)
			}
		}
	}
	defer openGate() // so the workers can stop

	admin, err := twice.NewClient(c.store, twice.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	var batch []twice.EnqueueParams
	for i := range jobs {
		batch = append(batch, twice.EnqueueParams{Args: gatedArgs{N: int64(i)}})
	}
	if _, err := admin.EnqueueMany(ctx, batch); err != nil {
		t.Fatal(err)
	}
	workers := map[string]*nodetest.Process{}
	for _, node := range []string{"w0", "w1", "w2"} {
		workers[node] = c.start(node, envLimits+"=gated")
	}
	kind := gatedArgs{}.Kind()
	usage := func() string {
		u, err := admin.LimitList(ctx)
		if err != nil {
			return err.Error()
		}
		var b strings.Builder
		for _, k := range u {
			fmt.Fprintf(&b, "%s: %s, running %d, throttled %d\n", k.Kind, strings.Join(k.Limit.Phrases(), ", "), k.Running, k.Throttled)
		}
		return b.String()
	}
	waitfor.CondWithin(t, time.Minute, "one job running under the published limit of 1, the rest throttled", func() bool {
		u, err := admin.LimitList(ctx)
		return err == nil && len(u) == 1 && u[0].Limit.Global == 1 && u[0].Running == 1 && u[0].Throttled == jobs-1
	}, usage)

	// Raise 1 → 3 through the admin API of a client without the kind.
	var raisedAt time.Time
	if err := pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&raisedAt); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.LimitSet(ctx, &twice.LimitSetParams{Kind: kind, Global: ptr(3), By: "clustertest", Reason: "raise for the backlog"}); err != nil {
		t.Fatal(err)
	}
	waitfor.CondWithin(t, time.Minute, "three jobs running at once under the raised limit", func() bool {
		return c.count(`SELECT count(*) FROM twice_jobs WHERE state = 'running'`) == 3 &&
			c.count(`SELECT count(*) FROM limit_log WHERE event = 'start'`) == 3
	}, usage)
	var firstStart time.Time
	if err := pool.QueryRow(ctx, `SELECT min(at) FROM limit_log WHERE event = 'start' AND at > $1`, raisedAt).Scan(&firstStart); err != nil {
		t.Fatal(err)
	}
	t.Logf("raised 1 → 3: the first start under the new limit came %s after the change (database clock)", firstStart.Sub(raisedAt))
	if n := c.count(`SELECT count(*) FROM limit_log WHERE event = 'end'`); n != 0 {
		t.Fatalf("%d held jobs ended with the gate closed", n)
	}
	waitApplied := func(n int, what string) {
		t.Helper()
		for node, p := range workers {
			waitfor.CondWithin(t, time.Minute, node+" to log the override "+what, func() bool {
				// A worker whose first read of the overrides came after the
				// change (a slow start under load) logs it as in force.
				logs := p.Stderr()
				seen := strings.Count(logs, "limit override applied") + strings.Count(logs, "limit override in force")
				return seen >= n && strings.Contains(logs, what)
			}, p.Stderr)
		}
	}
	waitApplied(1, "now=\"global 3\"")

	// Lower 3 → 1: the three running finish; the next start one at a time.
	var loweredAt time.Time
	if err := pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&loweredAt); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.LimitSet(ctx, &twice.LimitSetParams{Kind: kind, Global: ptr(1), By: "clustertest", Reason: "provider slow"}); err != nil {
		t.Fatal(err)
	}
	waitApplied(2, "now=\"global 1\"")
	openGate()
	c.waitCompleted(jobs, 2*time.Minute)
	c.workers.StopAll()

	log := c.limitLog()
	type span struct{ start, end time.Time }
	spans := map[int64]*span{}
	for _, e := range log {
		s := spans[e.jobID]
		if s == nil {
			s = &span{}
			spans[e.jobID] = s
		}
		if e.event == "start" {
			s.start = e.at
		} else {
			s.end = e.at
		}
	}
	later := 0
	for id, s := range spans {
		if !s.start.After(loweredAt) {
			continue
		}
		later++
		for other, o := range spans {
			if other != id && o.start.Before(s.start) && o.end.After(s.start) {
				t.Errorf("under the lowered limit of 1, job %d started at %s while job %d ran (%s to %s)", id,
					s.start.Format(time.StampMicro), other, o.start.Format(time.StampMicro), o.end.Format(time.StampMicro))
			}
		}
	}
	if later != jobs-3 {
		t.Errorf("%d jobs started after the limit was lowered, want %d", later, jobs-3)
	}

	var out, errb bytes.Buffer
	if code := twicecli.Stock().Run(ctx, []string{"limits", "history", kind, "--db", c.url}, &out, &errb); code != 0 {
		t.Fatalf("twice limits history: exit %d\n%s%s", code, out.String(), errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[1], "global 3 → global 1") || !strings.Contains(lines[1], `"provider slow"`) ||
		!strings.Contains(lines[2], "compiled → global 3") || !strings.Contains(lines[2], `"raise for the backlog"`) ||
		!strings.Contains(lines[1], "clustertest") || !strings.Contains(lines[2], "clustertest") {
		t.Errorf("twice limits history %s:\n%s", kind, out.String())
	}
	t.Logf("twice limits history %s:\n%s", kind, out.String())
}

func ptr(n int) *int { return &n }
