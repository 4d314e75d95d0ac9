package clustertest

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/dbrows"
	"github.com/twicejobs/twice/internal/testkit/nodetest"
)

// envLimits, set in a worker's environment, registers the flow-control
// kinds: "keyed" (a global limit of 5 and one per key), "rate" (50
// starts a second) or "gated" (a global limit of 1, changed at runtime). Unset registers none, so the other tests' workers keep
// the plain fetch.
const envLimits = "TWICE_CLUSTER_LIMITS"

// keyedArgs is a job of a kind limited to 5 running cluster-wide and one
// running per key, in enqueue order.
type keyedArgs struct {
	Key string `json:"key"`
}

func (keyedArgs) Kind() string { return "cluster.keyed.v1" }

// ratedArgs is a job of a kind limited to 50 starts a second.
type ratedArgs struct{ N int64 }

func (ratedArgs) Kind() string { return "cluster.rated.v1" }

const (
	keyedGlobal = 5
	ratedLimit  = 50
)

// registerLimited adds the flow-control kinds mode names (envLimits). Their
// handlers write every start and end to limit_log with the database's
// clock (one clock for every process), the record the test judges.
func registerLimited(reg *twice.Registry, db database, mode string) {
	record := func(ctx context.Context, jobID int64, key, event string) error {
		return db.Exec(ctx, `INSERT INTO limit_log (job_id, conc_key, event, node, at)
			VALUES ($1, $2, $3, $4, `+db.Dialect().now+`)`, jobID, key, event, os.Getenv(envNode))
	}
	switch mode {
	case "keyed":
		twice.MustRegister(reg, twice.HandlerFunc[keyedArgs](func(ctx context.Context, job *twice.Job[keyedArgs]) error {
			if err := record(ctx, job.ID, job.Args.Key, "start"); err != nil {
				return err
			}
			// The work: long enough for the limit to bind and for a kill
			// to find jobs in flight.
			time.Sleep(time.Duration(20+job.ID%30) * time.Millisecond)
			return record(ctx, job.ID, job.Args.Key, "end")
		}), &twice.KindOpts{Strategy: twice.None, MaxAttempts: 50,
			GlobalConcurrency: keyedGlobal, KeyConcurrency: 1, ConcurrencyKey: "key"})
	case "gated":
		registerGated(reg, db)
	case "rate":
		twice.MustRegister(reg, twice.HandlerFunc[ratedArgs](func(ctx context.Context, job *twice.Job[ratedArgs]) error {
			return record(ctx, job.ID, "", "start")
		}), &twice.KindOpts{Strategy: twice.None, MaxAttempts: 50,
			RateLimit: twice.RateLimit{Limit: ratedLimit, Period: time.Second}})
	}
}

// logEntry is one row of limit_log.
type logEntry struct {
	jobID int64
	key   string
	event string
	node  string
	at    time.Time
}

// limitLog is the handlers' record, in the order of its clock.
func (c *cluster) limitLog() []logEntry {
	c.t.Helper()
	rows, err := c.admin.Query(context.Background(), `SELECT job_id, conc_key, event, node, at FROM limit_log ORDER BY at, event`)
	if err != nil {
		c.t.Fatal(err)
	}
	out, err := dbrows.Collect(rows, func(row dbrows.Scanner) (logEntry, error) {
		var e logEntry
		err := row.Scan(&e.jobID, &e.key, &e.event, &e.node, &e.at)
		return e, err
	})
	if err != nil {
		c.t.Fatal(err)
	}
	return out
}

// createLimitLog adds the table the limited kinds' handlers write every
// start and end to.
func (c *cluster) createLimitLog() {
	c.t.Helper()
	c.exec(`CREATE TABLE limit_log (job_id bigint NOT NULL, conc_key text NOT NULL, event text NOT NULL,
		node text NOT NULL, at ` + c.dialect().timestamp + ` NOT NULL)`)
}

// TestClusterLimitsHoldThroughKill: 3 worker processes (20 slots each)
// work 1,000 jobs over 200 keys of a kind limited to 5 running
// cluster-wide and one per key; one process is SIGKILLed mid-run with jobs
// in flight. From the handlers' own record of every start and end, on the
// database's clock: never more than 5 ran at once, no key ever had two
// running, each key's jobs started in enqueue order (a killed job's retry
// before the key's later jobs), and every job completed: the killed
// process's slots came back through the rescue, none leaked.
func TestClusterLimitsHoldThroughKill(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test skipped in -short mode")
	}
	onEachBackend(t, testLimitsThroughKill)
}

func testLimitsThroughKill(t *testing.T, b *backend) {
	const keys, perKey = 200, 5
	c := newCluster(t, b)
	ctx := context.Background()
	c.createLimitLog()
	reg := twice.NewRegistry()
	// The enqueuer registers the kind too: the key is taken from the args
	// at enqueue. It runs nothing.
	registerLimited(reg, nil, "keyed")
	producer, err := twice.NewClient(c.store, twice.Config{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	var batch []twice.EnqueueParams
	for i := range keys * perKey {
		batch = append(batch, twice.EnqueueParams{Args: keyedArgs{Key: fmt.Sprint("k", i%keys)}})
	}
	if _, err := producer.EnqueueMany(ctx, batch); err != nil {
		t.Fatal(err)
	}
	total := keys * perKey

	workers := map[string]*nodetest.Process{}
	for _, node := range []string{"w0", "w1", "w2"} {
		workers[node] = c.start(node, envLimits+"=keyed")
	}
	c.waitCompleted(total*3/10, 5*time.Minute)
	// The victim is a node holding jobs now, so the kill strands some.
	// (Slots can be empty for a moment between a finish and the next
	// fetch: look again until one is busy.)
	var victim string
	tick := time.NewTicker(5 * time.Millisecond)
	for deadline := time.Now().Add(time.Minute); victim == ""; <-tick.C {
		err := c.admin.QueryRow(ctx, `SELECT attempted_by FROM twice_jobs WHERE state = 'running'
			GROUP BY attempted_by ORDER BY count(*) DESC LIMIT 1`).Scan(&victim)
		if err != nil && time.Now().After(deadline) {
			t.Fatalf("no node held a running job for a minute: %v", err)
		}
	}
	tick.Stop()
	c.kill(workers[victim])
	killedAt := time.Now()
	inFlight := c.count(`SELECT count(*) FROM twice_jobs WHERE state = 'running' AND attempted_by = $1`, victim)
	t.Logf("killed %s at %d completed jobs with %d of its jobs running", victim, c.completed(), inFlight)
	c.waitCompleted(total, 5*time.Minute)
	c.workers.StopAll()

	if n := c.count(`SELECT count(*) FROM twice_jobs WHERE state <> 'completed'`); n != 0 {
		t.Errorf("%d jobs not completed: a slot leaked or a job was lost", n)
	}
	log := c.limitLog()
	// Attempts: a start and its end, on the same node; an attempt of the
	// killed node with no end ended at the kill.
	type attempt struct {
		jobID      int64
		key, node  string
		start, end time.Time
	}
	open := map[string]*attempt{} // job/node -> attempt begun
	var attempts []*attempt
	for _, e := range log {
		id := fmt.Sprint(e.jobID, "/", e.node)
		switch e.event {
		case "start":
			a := &attempt{jobID: e.jobID, key: e.key, node: e.node, start: e.at}
			open[id] = a
			attempts = append(attempts, a)
		case "end":
			if a := open[id]; a != nil {
				a.end = e.at
				delete(open, id)
			}
		}
	}
	unended := 0
	for _, a := range open {
		if a.node != victim {
			t.Errorf("job %d on %s started and never ended, yet its node was not killed", a.jobID, a.node)
		}
		a.end = killedAt
		unended++
	}
	// The sweep: +1 at each start, -1 at each end, ends first at equal times.
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, a := range attempts {
		edges = append(edges, edge{a.start, 1}, edge{a.end, -1})
	}
	slices.SortFunc(edges, func(x, y edge) int {
		if c := x.at.Compare(y.at); c != 0 {
			return c
		}
		return x.delta - y.delta
	})
	running, peak := 0, 0
	for _, e := range edges {
		running += e.delta
		peak = max(peak, running)
	}
	if peak > keyedGlobal {
		t.Errorf("%d jobs ran at once, over the global limit of %d", peak, keyedGlobal)
	}
	byKey := map[string][]*attempt{}
	for _, a := range attempts {
		byKey[a.key] = append(byKey[a.key], a)
	}
	for key, as := range byKey {
		slices.SortFunc(as, func(x, y *attempt) int { return x.start.Compare(y.start) })
		for i := 1; i < len(as); i++ {
			if as[i].start.Before(as[i-1].end) {
				t.Errorf("key %s: job %d started at %s while job %d ran (until %s)", key, as[i].jobID,
					as[i].start.Format(time.StampMicro), as[i-1].jobID, as[i-1].end.Format(time.StampMicro))
			}
			if as[i].jobID < as[i-1].jobID {
				t.Errorf("key %s: job %d started after the later-enqueued job %d", key, as[i].jobID, as[i-1].jobID)
			}
		}
	}
	if len(byKey) != keys {
		t.Errorf("%d keys ran, want %d", len(byKey), keys)
	}
	t.Logf("%d attempts for %d jobs (%d cut by the kill); peak %d running of %d; %d keys in order",
		len(attempts), total, unended, peak, keyedGlobal, len(byKey))
}

// TestClusterRateLimit: 3 worker processes work a kind limited to 50
// starts a second for 10 seconds, with more jobs waiting than they may
// start. The limit is judged where a start happens: a trigger records the
// database's clock as each row turns running (one clock for every
// process, read by the statement that starts the job, however long the
// fetch waited for the kind's lock: clock_timestamp() on PostgreSQL,
// SYSDATE(6) on MySQL), and no one-second window of those moments holds
// more than 50 (stamped with the fetch's Now, read before its wait for
// the lock, 90-95 did on PostgreSQL). The store's own log of the starts
// (twice_rate_starts, copied by a trigger before the fetches prune it)
// must hold the same. The rate measured (steady, by the store's stamps;
// and from the handlers' starts, whose clock lags the fetch by a variable
// delay) is logged against the limit, not asserted: it depends on the
// machine.
func TestClusterRateLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test skipped in -short mode")
	}
	onEachBackend(t, testRateLimit)
}

// rateWitness is the SQL of the rate test's two witnesses on b: a copy of
// every row of twice_rate_starts into rate_audit, and the moment each job
// turns running into running_at. An AFTER row trigger fires at the end of
// the fetch's statement, the latest moment within it (a BEFORE one fires
// as the row is written, earlier).
func rateWitness(b *backend) []string {
	if b == postgresBackend {
		return []string{
			`CREATE TABLE rate_audit (kind text NOT NULL, conc_key text NOT NULL, at timestamptz NOT NULL)`,
			`CREATE FUNCTION audit_rate() RETURNS trigger LANGUAGE plpgsql AS $$
				BEGIN INSERT INTO rate_audit VALUES (NEW.kind, NEW.key, NEW.at); RETURN NEW; END $$`,
			`CREATE TRIGGER audit_rate AFTER INSERT ON twice_rate_starts FOR EACH ROW EXECUTE FUNCTION audit_rate()`,
			`CREATE TABLE running_at (job_id bigint NOT NULL, at timestamptz NOT NULL)`,
			`CREATE FUNCTION record_running() RETURNS trigger LANGUAGE plpgsql AS $$
				BEGIN INSERT INTO running_at VALUES (NEW.id, clock_timestamp()); RETURN NEW; END $$`,
			`CREATE TRIGGER record_running AFTER UPDATE OF state ON twice_jobs FOR EACH ROW
				WHEN (NEW.state = 'running' AND OLD.state IS DISTINCT FROM 'running')
				EXECUTE FUNCTION record_running()`,
		}
	}
	// SYSDATE(6) is the moment the trigger runs (NOW(6) would be the
	// statement's start), on the server's zone: running_at is compared
	// with itself only.
	return []string{
		`CREATE TABLE rate_audit (kind VARBINARY(255) NOT NULL, conc_key VARBINARY(255) NOT NULL, at DATETIME(6) NOT NULL)`,
		"CREATE TRIGGER audit_rate AFTER INSERT ON twice_rate_starts FOR EACH ROW\n" +
			"INSERT INTO rate_audit VALUES (NEW.kind, NEW.`key`, NEW.at)",
		`CREATE TABLE running_at (job_id bigint NOT NULL, at DATETIME(6) NOT NULL)`,
		`CREATE TRIGGER record_running AFTER UPDATE ON twice_jobs FOR EACH ROW
			INSERT INTO running_at SELECT NEW.id, SYSDATE(6) FROM DUAL
			WHERE NEW.state = 'running' AND NOT OLD.state <=> 'running'`,
	}
}

// times reads a query of one column of moments, in order.
func (c *cluster) times(q string, args ...any) []time.Time {
	c.t.Helper()
	rows, err := c.admin.Query(context.Background(), q, args...)
	if err != nil {
		c.t.Fatalf("%s: %v", q, err)
	}
	out, err := dbrows.Collect(rows, dbrows.One[time.Time])
	if err != nil {
		c.t.Fatalf("%s: %v", q, err)
	}
	slices.SortFunc(out, time.Time.Compare)
	return out
}

// densestSecond is the most moments of sorted that one second holds (from
// a moment to 999,999 µs after it).
func densestSecond(sorted []time.Time) int {
	densest, j := 0, 0
	for i, from := range sorted {
		for j < len(sorted) && sorted[j].Sub(from) < time.Second {
			j++
		}
		densest = max(densest, j-i)
	}
	return densest
}

func testRateLimit(t *testing.T, b *backend) {
	const run = 10 * time.Second
	c := newCluster(t, b)
	ctx := context.Background()
	c.createLimitLog()
	c.exec(rateWitness(b)...)
	producer, err := twice.NewClient(c.store, twice.Config{})
	if err != nil {
		t.Fatal(err)
	}
	n := int(ratedLimit*run/time.Second) * 3 / 2
	batch := make([]twice.EnqueueParams, n)
	for i := range batch {
		batch[i] = twice.EnqueueParams{Args: ratedArgs{N: int64(i)}}
	}
	if _, err := producer.EnqueueMany(ctx, batch); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		c.start(fmt.Sprint("r", i), envLimits+"=rate")
	}
	// Wait for the first start, then for the run to pass on the
	// database's clock.
	deadline := time.Now().Add(time.Minute)
	var first time.Time
	for {
		var at *time.Time
		if err := c.admin.QueryRow(ctx, `SELECT min(at) FROM limit_log`).Scan(&at); err != nil {
			t.Fatal(err)
		}
		if at != nil {
			first = *at
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no job started within a minute")
		}
		time.Sleep(50 * time.Millisecond) // polling the handlers' record; nothing to subscribe to across processes
	}
	time.Sleep(run + 500*time.Millisecond) // the run itself: the measurement is of time passing
	c.workers.StopAll()

	started := c.count(`SELECT count(*) FROM limit_log WHERE at >= $1 AND at < $2`, first, first.Add(run))
	rate := float64(started) / run.Seconds()
	// The densest one-second windows: of the moments rows turned running,
	// of the store's starts (by their stamps), of the handlers' starts.
	runningDensest := densestSecond(c.times(`SELECT at FROM running_at`))
	stamps := c.times(`SELECT at FROM rate_audit WHERE conc_key = ''`)
	densest := densestSecond(stamps)
	handlerDensest := densestSecond(c.times(`SELECT at FROM limit_log`))
	if len(stamps) < 2 {
		t.Fatalf("the store recorded %d starts", len(stamps))
	}
	// The steady rate by the store's own clock: every start but the first
	// window's burst, over the time from the first start to the last.
	total, first0, end := len(stamps), stamps[0], stamps[len(stamps)-1]
	steady := float64(total-ratedLimit) / end.Sub(first0).Seconds()
	if runningDensest > ratedLimit {
		t.Errorf("%d jobs turned running in one second on the database's clock, over the limit of %d", runningDensest, ratedLimit)
	}
	if densest > ratedLimit {
		t.Errorf("the store recorded %d starts in one second, over the limit of %d", densest, ratedLimit)
	}
	t.Logf("limit %d/s, 3 processes, %s: densest 1 s window: %d turned running (database clock), %d by the store's stamps, %d by the handlers' start times; "+
		"steady rate by the store's stamps %.1f/s (%.1f%% of the limit, %d starts over %s); by the handlers' clock %d started in the %s from the first, %.1f/s",
		ratedLimit, run, runningDensest, densest, handlerDensest, steady, 100*steady/ratedLimit, total, end.Sub(first0).Round(time.Millisecond),
		started, run, rate)
}
