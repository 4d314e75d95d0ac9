package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// The chaos workload (issue 23 item 4) is a correctness comparison, not a
// speed one: three worker processes work the same jobs while one of them is
// killed with SIGKILL every few seconds and replaced at once; then the
// survivors drain the queue and the database is asked what became of every
// job and every effect. Each job's handler writes one ledger row (its
// effect) under the job's effect key; the ledger has no unique constraint,
// so a duplicate effect is a visible second row.

// chaosWorkers is how many worker processes are up at any time.
const chaosWorkers = 3

// chaosLease is how long a killed worker's jobs stay taken: twice's
// LeaseDuration, River's RescueStuckJobsAfter. Each system then looks for
// such jobs on its own cadence (see chaosTwiceRescueInterval); Asynq's
// lease (30 s, looked for every minute) is not settable.
const chaosLease = 5 * time.Second

// chaosRetryBackoff is the wait before a failed attempt is retried, the same
// fixed wait on both systems.
const chaosRetryBackoff = time.Second

// chaosMaxAttempts is each job's attempts, River's default on both systems.
const chaosMaxAttempts = 25

// chaosOptions are the chaos workload's flags; the child ones are internal.
type chaosOptions struct {
	duration  time.Duration
	jobs      int
	killEvery time.Duration
	modes     string
	drain     time.Duration
	slots     int
	work      time.Duration // 0: derived from duration, jobs and slots
	redis     string        // Asynq's Redis

	// child mode
	mode string
	node string
}

func (c *chaosOptions) flags() {
	flag.DurationVar(&c.duration, "chaos-duration", 60*time.Second, "-only chaos: how long the workers are killed, one every -chaos-kill-every")
	flag.IntVar(&c.jobs, "chaos-jobs", 20_000, "-only chaos: jobs per system and mode, each writing one ledger row")
	flag.DurationVar(&c.killEvery, "chaos-kill-every", 2*time.Second, "-only chaos: time between two SIGKILLs (each killed worker is replaced at once)")
	flag.StringVar(&c.modes, "chaos-modes", strings.Join(chaosModeNames(), ","), "-only chaos: comma-separated modes to run")
	flag.DurationVar(&c.drain, "chaos-drain", 5*time.Minute, "-only chaos: how long the survivors may take, after the last kill, to finish every job")
	flag.IntVar(&c.slots, "chaos-slots", 10, "-only chaos: concurrent jobs in each worker process")
	flag.DurationVar(&c.work, "chaos-work", 0, "-only chaos: handler time around its effect (default: what spreads the jobs over -chaos-duration: duration × 3 workers × slots / jobs)")
	flag.StringVar(&c.redis, "asynq-redis", "127.0.0.1:6379", "-only chaos: the Redis the asynq mode runs on (the mode is skipped, with the reason, when none answers)")
	flag.StringVar(&c.mode, "chaos-mode", "", "internal: the chaos mode a worker runs")
	flag.StringVar(&c.node, "chaos-node", "", "internal: the chaos worker's node id")
}

// handlerTime is how long a handler takes around its effect, so that the
// jobs would take about the kill phase to burn down without kills: the kills
// then land on working processes all along.
func (c *chaosOptions) handlerTime() time.Duration {
	if c.work > 0 {
		return c.work
	}
	return c.duration * time.Duration(chaosWorkers*c.slots) / time.Duration(max(c.jobs, 1))
}

// chaosMode is one system with one way of writing its effect.
type chaosMode struct {
	name   string
	system string // "twice", "river" or "asynq"
	// strategy is twice's strategy, or River's "default" or "complete-tx".
	strategy string
	// inTx says the effect commits with the job's completion.
	inTx bool
}

var chaosModes = []chaosMode{
	{name: "twice-claim-after", system: "twice", strategy: "claim-after"},
	{name: "twice-claim-before", system: "twice", strategy: "claim-before"},
	{name: "twice-transactional", system: "twice", strategy: "transactional", inTx: true},
	{name: "twice-none", system: "twice", strategy: "none"},
	{name: "river-default", system: "river", strategy: "default"},
	{name: "river-complete-tx", system: "river", strategy: "complete-tx", inTx: true},
	{name: "asynq", system: "asynq", strategy: "default"},
}

func chaosModeNames() []string {
	var names []string
	for _, m := range chaosModes {
		names = append(names, m.name)
	}
	return names
}

func chaosModeNamed(name string) (chaosMode, error) {
	for _, m := range chaosModes {
		if m.name == name {
			return m, nil
		}
	}
	return chaosMode{}, fmt.Errorf("unknown chaos mode %q: use one of %s", name, strings.Join(chaosModeNames(), ", "))
}

// chaosSide is what the parent needs of a system: set up its schema with the
// jobs, and ask the database how things stand.
type chaosSide interface {
	// prepare recreates the schema, the ledger and the completion witness,
	// and inserts the jobs.
	prepare(ctx context.Context, jobs int) error
	// runningOn counts the jobs the node holds as running.
	runningOn(ctx context.Context, node string) (int, error)
	// unfinished counts jobs that will still run.
	unfinished(ctx context.Context) (int, error)
	// tally counts what became of the jobs and their effects.
	tally(ctx context.Context, jobs int) (*chaosTally, error)
	close()
}

// chaosTally is one mode's result.
type chaosTally struct {
	mode     string
	kills    int
	jobs     int
	inFlight int           // the killed workers' running jobs, summed over the kills
	drain    time.Duration // from the last kill until no job was left to run
	drained  bool

	completed  int
	unfinished int // still queued or running when the drain gave up
	needsHuman int // dead-lettered because the effect may have happened
	// needsHumanApplied are those of them whose effect did happen: a
	// human discards these, and releases the marker of the others and
	// retries them.
	needsHumanApplied int
	lost              int // neither completed, nor unfinished, nor waiting for a human
	completedTwice    int // jobs moved into completed more than once
	// completedTwiceNA says the system keeps no record to count it from.
	completedTwiceNA bool
	duplicates       int // ledger rows beyond one per effect key
	missing          int // completed jobs whose effect key has no ledger row
}

// chaosSchema is the schema a mode's system works in: its own, so the
// completion trigger never slows the speed workloads' tables.
func chaosSchema(system string) string { return "compare_chaos_" + system }

// chaosWorker is one running worker process.
type chaosWorker struct {
	node   string
	cmd    *exec.Cmd
	exited chan error
}

// runChaos runs every selected mode and prints the table.
func (o *options) runChaos(ctx context.Context) error {
	var modes []chaosMode
	for _, name := range strings.Split(o.chaos.modes, ",") {
		m, err := chaosModeNamed(strings.TrimSpace(name))
		if err != nil {
			return fmt.Errorf("-chaos-modes: %w", err)
		}
		modes = append(modes, m)
	}
	if o.chaos.killEvery <= 0 || o.chaos.duration <= 0 || o.chaos.jobs < 1 {
		return fmt.Errorf("chaos: give a positive -chaos-duration, -chaos-kill-every and -chaos-jobs")
	}
	fmt.Printf("chaos: %d worker processes of %d slots, one killed with SIGKILL every %s for %s and replaced at once; "+
		"%d jobs per mode, each writing one ledger row; handler %s around its effect; "+
		"twice lease %s looked for every %s, River rescue after %s (its rescuer: at each leader's start, then every 30s), Asynq its fixed 30s lease looked for every 1m; "+
		"retry after %s, %d attempts; %s\n",
		chaosWorkers, o.chaos.slots, o.chaos.killEvery, o.chaos.duration, o.chaos.jobs, o.chaos.handlerTime(),
		chaosLease, chaosTwiceRescueInterval, chaosLease, chaosRetryBackoff, chaosMaxAttempts, pgSettings(ctx, o.pg))
	var tallies []*chaosTally
	for _, m := range modes {
		if m.system == "asynq" {
			if reason := asynqReachable(o.chaos.redis); reason != "" {
				fmt.Println("asynq: skipped:", reason)
				continue
			}
		}
		t, err := o.chaosRun(ctx, m)
		if err != nil {
			return fmt.Errorf("chaos %s: %w", m.name, err)
		}
		applied := ""
		if t.needsHuman > 0 {
			applied = fmt.Sprintf(" (%d of them had written their effect)", t.needsHumanApplied)
		}
		fmt.Printf("%-20s %d kills, %d in flight at them, drained in %s: %d completed, %d lost, %d need a human%s, %d duplicate effects\n",
			m.name, t.kills, t.inFlight, t.drain.Round(100*time.Millisecond), t.completed, t.lost, t.needsHuman, applied, t.duplicates)
		tallies = append(tallies, t)
	}
	fmt.Println()
	printChaosTable(tallies)
	return nil
}

func (o *options) chaosSide(ctx context.Context, m chaosMode) (chaosSide, error) {
	u, err := o.schemaURL(chaosSchema(m.system))
	if err != nil {
		return nil, err
	}
	switch m.system {
	case "twice":
		return newChaosTwice(ctx, o.pg, u, m)
	case "river":
		return newChaosRiver(ctx, o.pg, u, m)
	case "asynq":
		return newChaosAsynq(ctx, o.pg, u, o.chaos.redis)
	}
	return nil, fmt.Errorf("unknown system %q", m.system)
}

// chaosRun runs one mode: prepare, kill for the duration, drain, tally.
func (o *options) chaosRun(ctx context.Context, m chaosMode) (*chaosTally, error) {
	side, err := o.chaosSide(ctx, m)
	if err != nil {
		return nil, err
	}
	defer side.close()
	if err := side.prepare(ctx, o.chaos.jobs); err != nil {
		return nil, fmt.Errorf("prepare: %w", err)
	}
	t := &chaosTally{mode: m.name, jobs: o.chaos.jobs}
	seq := 0
	start := func() (*chaosWorker, error) {
		seq++
		return o.startChaosWorker(m, fmt.Sprintf("chaos-%s-w%d", m.system, seq))
	}
	var workers []*chaosWorker
	defer func() {
		for _, w := range workers {
			w.stop()
		}
	}()
	for range chaosWorkers {
		w, err := start()
		if err != nil {
			return nil, err
		}
		workers = append(workers, w)
	}
	tick := time.NewTicker(o.chaos.killEvery)
	for range int(o.chaos.duration / o.chaos.killEvery) {
		<-tick.C
		i := rand.IntN(len(workers))
		victim := workers[i]
		if err := victim.kill(); err != nil {
			tick.Stop()
			return nil, err
		}
		// Right after the SIGKILL and before its leases could expire, the
		// rows still running under the victim's name are exactly the jobs it
		// held: the only ones whose effect may be repeated.
		n, err := side.runningOn(ctx, victim.node)
		if err != nil {
			tick.Stop()
			return nil, err
		}
		t.kills++
		t.inFlight += n
		replacement, err := start()
		if err != nil {
			workers = slices.Delete(workers, i, i+1)
			tick.Stop()
			return nil, err
		}
		workers[i] = replacement
	}
	tick.Stop()
	drainFrom := time.Now()
	for {
		n, err := side.unfinished(ctx)
		if err != nil {
			return nil, err
		}
		if n == 0 {
			t.drained = true
			break
		}
		if time.Since(drainFrom) > o.chaos.drain {
			fmt.Printf("  %s: %d jobs still unfinished after a drain of %s\n", m.name, n, o.chaos.drain)
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.drain = time.Since(drainFrom)
	for _, w := range workers {
		w.stop()
	}
	workers = nil
	tally, err := side.tally(ctx, o.chaos.jobs)
	if err != nil {
		return nil, err
	}
	tally.mode, tally.kills, tally.jobs, tally.inFlight, tally.drain, tally.drained = t.mode, t.kills, t.jobs, t.inFlight, t.drain, t.drained
	return tally, nil
}

// startChaosWorker starts a worker process of mode m named node.
func (o *options) startChaosWorker(m chaosMode, node string) (*chaosWorker, error) {
	args := []string{"-child", "-system", m.system, "-workload", "chaos", "-chaos-mode", m.name, "-chaos-node", node,
		"-pg", o.pg, "-pool-conns", fmt.Sprint(o.poolConns), "-chaos-slots", fmt.Sprint(o.chaos.slots),
		"-chaos-work", o.chaos.handlerTime().String(), "-asynq-redis", o.chaos.redis}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start worker %s: %w", node, err)
	}
	w := &chaosWorker{node: node, cmd: cmd, exited: make(chan error, 1)}
	go func() { w.exited <- cmd.Wait() }()
	return w, nil
}

// kill ends the worker with SIGKILL and waits for it to be gone.
func (w *chaosWorker) kill() error {
	if err := w.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill %s: %w", w.node, err)
	}
	err := <-w.exited
	if err == nil {
		return fmt.Errorf("worker %s exited by itself before its SIGKILL", w.node)
	}
	if !strings.Contains(err.Error(), "killed") {
		return fmt.Errorf("worker %s ended on its own before its SIGKILL: %w", w.node, err)
	}
	return nil
}

// stop asks the worker to drain with SIGTERM, and kills it if it has not
// exited 30 s later.
func (w *chaosWorker) stop() {
	if w.cmd.ProcessState != nil {
		return
	}
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-w.exited:
		if err != nil {
			fmt.Fprintf(os.Stderr, "chaos worker %s exited: %v\n", w.node, err)
		}
	case <-time.After(30 * time.Second):
		_ = w.kill()
	}
}

// runChaosChild is a worker process: it works the mode's jobs until SIGTERM.
func (o *options) runChaosChild(ctx context.Context) error {
	m, err := chaosModeNamed(o.chaos.mode)
	if err != nil {
		return err
	}
	u, err := o.schemaURL(chaosSchema(m.system))
	if err != nil {
		return err
	}
	ctx, stop := signalContext(ctx)
	defer stop()
	switch m.system {
	case "river":
		return chaosRiverWorkerRun(ctx, u, m, o.chaos)
	case "asynq":
		return chaosAsynqWorkerRun(ctx, u, o.chaos.redis, o.chaos)
	}
	return chaosTwiceWorker(ctx, u, m, o.chaos)
}

// signalContext is ctx, done on SIGTERM or SIGINT.
func signalContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
}

// sleepAround is a handler's time: a uniformly drawn half to one and a half
// times d.
func sleepAround(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return d/2 + rand.N(d)
}

// chaosExec runs statements on the -pg database, not in any schema.
func chaosExec(ctx context.Context, pool *pgxpool.Pool, stmts ...string) error {
	for _, s := range stmts {
		if _, err := pool.Exec(ctx, s); err != nil {
			return fmt.Errorf("%.60s: %w", s, err)
		}
	}
	return nil
}

// ledgerDDL creates the effect's table (no unique constraint on the key:
// a duplicate effect is a second row) and the witness of every move of a
// job into completed, fed by a trigger on the system's jobs table (none
// when jobsTable is "": its jobs are not in PostgreSQL).
func ledgerDDL(jobsTable string) []string {
	ledger := []string{
		`CREATE TABLE chaos_ledger (effect_key text NOT NULL, job_id bigint NOT NULL, at timestamptz NOT NULL DEFAULT now())`,
		`CREATE INDEX chaos_ledger_key ON chaos_ledger (effect_key)`,
		`CREATE TABLE chaos_completions (job_id bigint NOT NULL, at timestamptz NOT NULL DEFAULT now())`,
	}
	if jobsTable == "" {
		return ledger
	}
	return append(ledger,
		// Per statement, from the transition tables: a twice job that
		// completes moves to another partition of twice_jobs, which a
		// row-level UPDATE trigger does not see.
		`CREATE FUNCTION chaos_record_completion() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN
				INSERT INTO chaos_completions (job_id)
				SELECT n.id FROM chaos_new AS n JOIN chaos_old AS o ON o.id = n.id
				WHERE n.state = 'completed' AND o.state <> 'completed';
				RETURN NULL;
			END $$`,
		`CREATE TRIGGER chaos_record_completion AFTER UPDATE ON `+jobsTable+`
			REFERENCING OLD TABLE AS chaos_old NEW TABLE AS chaos_new
			FOR EACH STATEMENT EXECUTE FUNCTION chaos_record_completion()`)
}

// effectKey is job n's effect key.
func effectKey(n int64) string { return fmt.Sprintf("effect-%d", n) }

// commonTally fills in what both systems count the same way from the ledger
// and the completion witness.
func commonTally(ctx context.Context, pool *pgxpool.Pool, t *chaosTally) error {
	for _, q := range []struct {
		dst *int
		sql string
	}{
		{&t.completedTwice, `SELECT count(*) FROM (SELECT job_id FROM chaos_completions GROUP BY job_id HAVING count(*) > 1) d`},
		{&t.duplicates, `SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS n FROM chaos_ledger GROUP BY effect_key) d`},
	} {
		if err := pool.QueryRow(ctx, q.sql).Scan(q.dst); err != nil {
			return fmt.Errorf("tally: %w", err)
		}
	}
	return nil
}

// printChaosTable prints one line per mode.
func printChaosTable(ts []*chaosTally) {
	for _, l := range []string{
		"chaos: lost = jobs neither completed, nor still queued (unfinished: the drain gave up), nor dead-lettered for a human",
		"       (needs-a-human: ClaimBefore's \"the effect may have happened\"); River's discarded and Asynq's archived jobs count as lost;",
		"       completed twice = jobs the database saw move into completed more than once (a trigger on the jobs table; n/a for Asynq, whose Redis keeps no such history);",
		"       duplicate effects = ledger rows beyond one per effect key (the ledger has no unique constraint);",
		"       in flight at kills = the killed workers' running jobs, read right after each SIGKILL, summed (Asynq: its handlers' own record, start to return);",
		"       effects missing = completed jobs with no ledger row",
	} {
		fmt.Println(l)
	}
	header := []string{"mode", "kills", "jobs", "lost", "needs-a-human", "unfinished", "completed twice", "duplicate effects",
		"dup/1,000 kills", "in flight at kills", "effects missing", "drain"}
	rows := [][]string{header}
	for _, t := range ts {
		per := "n/a"
		if t.kills > 0 {
			per = fmt.Sprintf("%.0f", float64(t.duplicates)*1000/float64(t.kills))
		}
		twice := fmt.Sprint(t.completedTwice)
		if t.completedTwiceNA {
			twice = "n/a"
		}
		drain := t.drain.Round(100 * time.Millisecond).String()
		if !t.drained {
			drain = "> " + drain
		}
		rows = append(rows, []string{t.mode, fmt.Sprint(t.kills), fmt.Sprint(t.jobs), fmt.Sprint(t.lost), fmt.Sprint(t.needsHuman),
			fmt.Sprint(t.unfinished), twice, fmt.Sprint(t.duplicates), per, fmt.Sprint(t.inFlight),
			fmt.Sprint(t.missing), drain})
	}
	widths := make([]int, len(header))
	for _, r := range rows {
		for i, c := range r {
			widths[i] = max(widths[i], len(c))
		}
	}
	for _, r := range rows {
		cells := slices.Clone(r)
		for i, c := range cells {
			cells[i] = c + strings.Repeat(" ", widths[i]-len(c))
		}
		fmt.Println("| " + strings.Join(cells, " | ") + " |")
		if &r[0] == &rows[0][0] {
			seps := make([]string, len(widths))
			for i, w := range widths {
				seps[i] = strings.Repeat("-", w)
			}
			fmt.Println("|-" + strings.Join(seps, "-|-") + "-|")
		}
	}
}
