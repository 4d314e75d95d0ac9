package twicecli_test

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/twicejobs/twice/internal/testkit/pgtest"
	"github.com/twicejobs/twice/internal/testkit/waitfor"
	"github.com/twicejobs/twice/twicecli/internal/cli"
	_ "github.com/twicejobs/twice/twicesqlite" // the "sqlite" driver for snapshots
)

// TestNewUserWalkthrough is issue 11's "tried as a new user would": a fresh
// module with two kinds of its own (invoice.charge.v1 fail-closed,
// account.reset.v1 with a sensitive field), its own binary built with
// twicecli (its 'serve' is its worker), and the stock twice binary beside
// it. Every CLI command shows and acts on those kinds correctly in both
// binaries, and the stock serve and dashboard leave the database's tables
// and switches untouched. One build, then SQLite, and PostgreSQL when
// TWICE_TEST_POSTGRES is set.
func TestNewUserWalkthrough(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module: not in -short")
	}
	shop := buildShop(t)
	t.Run("demo not linked", func(t *testing.T) {
		// Only the stock binary (twicecli.Stock) reaches the demo: a
		// team's binary carries none of its code.
		out, err := exec.CommandContext(t.Context(), "go", "tool", "nm", shop).CombinedOutput()
		if err != nil {
			t.Fatalf("go tool nm: %v\n%s", err, out)
		}
		for _, sym := range []string{"twicecli/internal/demo.Run", "twicecli/internal/demo.RunOnce", "twicecli/internal/cli.DemoCommand"} {
			if bytes.Contains(out, []byte(sym)) {
				t.Errorf("the team's binary links %s", sym)
			}
		}
		if !bytes.Contains(out, []byte("twicecli/internal/cli.Main")) {
			t.Error("go tool nm lists no cli.Main: the symbol check above proves nothing")
		}
	})
	t.Run("sqlite", func(t *testing.T) {
		walk(t, shop, filepath.Join(t.TempDir(), "shop.db"))
	})
	t.Run("postgres", func(t *testing.T) {
		u, _ := pgtest.Schema(t, "twice_walk")
		walk(t, shop, u)
	})
}

// buildShop writes testdata/shop into a fresh module that requires this
// repository through a replace directive, and builds it once.
func buildShop(t *testing.T) string {
	t.Helper()
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	src, err := os.ReadFile(filepath.Join("testdata", "shop", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	sum, err := os.ReadFile(filepath.Join(repo, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	mod := fmt.Sprintf("module example.com/shop\n\ngo 1.24\n\nrequire github.com/twicejobs/twice v0.0.0\n\nreplace github.com/twicejobs/twice => %s\n", repo)
	for name, data := range map[string][]byte{"main.go": src, "go.mod": []byte(mod), "go.sum": sum} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "shop")
	if runtime.GOOS == "windows" {
		bin += ".exe"
	}
	// -mod=mod completes go.mod from the replaced module's requirements,
	// checked against this repository's go.sum. The build gets what the
	// module cache lacks as any build on this machine would: through the
	// environment's GOPROXY and GOFLAGS, inherited, not overridden (with
	// GOPROXY=off it failed on a cold cache: only .ci/run's 'go mod
	// download' had filled it). The temporary directory is no repository,
	// so there is no VCS to stamp; GOWORK=off keeps a workspace around the
	// checkout out of a module that is not in it.
	build := exec.CommandContext(t.Context(), "go", "build", "-mod=mod", "-buildvcs=false", "-o", bin, ".")
	build.Dir = dir
	build.Env = append(os.Environ(), "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build of the new user's module: %v\n%s", err, out)
	}
	return bin
}

// result is one CLI run.
type result struct {
	code           int
	stdout, stderr string
}

// walker runs both binaries on one database.
type walker struct {
	t    *testing.T
	shop string // the team's binary
	db   string
}

// team runs the team's binary with args on the database.
func (w *walker) team(args ...string) result {
	w.t.Helper()
	cmd := exec.CommandContext(w.t.Context(), w.shop, append(args, "--db", w.db)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			w.t.Fatalf("shop %q: %v", args, err)
		}
		code = ee.ExitCode()
	}
	return result{code, out.String(), errb.String()}
}

// stock runs the stock twice binary's command line, in process.
func (w *walker) stock(args ...string) result {
	w.t.Helper()
	var out, errb bytes.Buffer
	code := cli.Main(w.t.Context(), cli.Options{Demo: cli.DemoCommand}, append(args, "--db", w.db), &out, &errb)
	return result{code, out.String(), errb.String()}
}

// both runs args with each binary, expecting code; it returns the team's
// result and the stock binary's.
func (w *walker) both(code int, args ...string) (team, stock result) {
	w.t.Helper()
	team, stock = w.team(args...), w.stock(args...)
	for name, r := range map[string]result{"shop": team, "twice": stock} {
		if r.code != code {
			w.t.Errorf("%s %s: exit %d, want %d\nstdout: %s\nstderr: %s", name, strings.Join(args, " "), r.code, code, r.stdout, r.stderr)
		}
		// Each binary's error line starts with its own name.
		if code != 0 && (!strings.HasPrefix(r.stderr, name+": ") || strings.Count(r.stderr, "\n") != 1) {
			w.t.Errorf("%s %s: the error is not one line: %q", name, strings.Join(args, " "), r.stderr)
		}
	}
	return team, stock
}

var enqueued = regexp.MustCompile(`^enqueued job (\d+) \(([^,]+), queue (\S+),`)

// enqueue enqueues with binary run and returns the job id and queue.
func (w *walker) enqueue(run func(...string) result, args ...string) (int64, string) {
	w.t.Helper()
	r := run(append([]string{"enqueue"}, args...)...)
	m := enqueued.FindStringSubmatch(r.stdout)
	if r.code != 0 || m == nil {
		w.t.Fatalf("enqueue %q: exit %d\n%s%s", args, r.code, r.stdout, r.stderr)
	}
	id, _ := strconv.ParseInt(m[1], 10, 64)
	return id, m[3]
}

// job is the part of 'jobs show --json' the walk looks at.
type job struct {
	ID           int64           `json:"id"`
	Kind         string          `json:"kind"`
	Queue        string          `json:"queue"`
	State        string          `json:"state"`
	MaxAttempts  int             `json:"max_attempts"`
	Args         json.RawMessage `json:"args"`
	ArgsRedacted []string        `json:"args_redacted"`
	Scheduled    bool            `json:"scheduled"`
}

func (w *walker) show(run func(...string) result, id int64) job {
	w.t.Helper()
	r := run("jobs", "show", strconv.FormatInt(id, 10), "--json")
	var j job
	if err := json.Unmarshal([]byte(r.stdout), &j); err != nil {
		w.t.Fatalf("jobs show %d --json: %v\n%s%s", id, err, r.stdout, r.stderr)
	}
	return j
}

// worker is the team's 'shop serve', running until stop.
type worker struct {
	cmd   *exec.Cmd
	lines chan string
	done  chan struct{}
	mu    sync.Mutex
	out   strings.Builder
}

func (w *walker) serve() *worker {
	w.t.Helper()
	cmd := exec.Command(w.shop, "serve", "--db", w.db, "--grace", "5s")
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		w.t.Fatal(err)
	}
	wk := &worker{cmd: cmd, lines: make(chan string, 100), done: make(chan struct{})}
	cmd.Stderr = &lockedWriter{mu: &wk.mu, b: &wk.out}
	if err := cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	go func() {
		defer close(wk.done)
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			wk.lines <- sc.Text()
		}
	}()
	w.t.Cleanup(func() {
		_ = cmd.Process.Kill()
		waitfor.Closed(w.t, wk.done, "the killed worker's output to end")
		_ = cmd.Wait()
	})
	wk.wait(w.t, "serving ")
	return wk
}

// wait returns once the worker printed a line starting with prefix.
func (wk *worker) wait(t *testing.T, prefix string) {
	t.Helper()
	waitfor.Match(t, wk.lines, wk.done, func(l string) bool { return strings.HasPrefix(l, prefix) },
		fmt.Sprintf("the worker to print %q", prefix), wk.stderr)
}

func (wk *worker) stderr() string {
	wk.mu.Lock()
	defer wk.mu.Unlock()
	return wk.out.String()
}

// stop sends SIGTERM and expects a clean exit.
func (wk *worker) stop(t *testing.T) {
	t.Helper()
	if err := wk.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitfor.Closed(t, wk.done, "the worker to stop on SIGTERM")
	if err := wk.cmd.Wait(); err != nil {
		t.Errorf("the worker exited with %v\n%s", err, wk.stderr())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// toggleRow is the part of 'toggles ls --json' the walk looks at.
type toggleRow struct {
	Kind       string `json:"kind"`
	State      string `json:"state"`
	DecidedBy  string `json:"decided_by"`
	FailClosed *bool  `json:"fail_closed"`
}

func walk(t *testing.T, shop, db string) {
	w := &walker{t: t, shop: shop, db: db}
	if r := w.team("migrate"); r.code != 0 {
		t.Fatalf("shop migrate: %s", r.stderr)
	}
	wk := w.serve() // publishes the two kinds to the catalog at start

	t.Run("toggles ls shows state and fail-closed", func(t *testing.T) {
		team, stock := w.both(0, "toggles", "ls", "--json")
		for name, r := range map[string]result{"shop": team, "twice": stock} {
			var rows []toggleRow
			if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, row := range rows {
				fc := "?"
				if row.FailClosed != nil {
					fc = strconv.FormatBool(*row.FailClosed)
				}
				got[row.Kind] = row.State + " " + row.DecidedBy + " " + fc
			}
			want := map[string]string{"invoice.charge.v1": "off default true", "account.reset.v1": "on default false"}
			for k, v := range want {
				if got[k] != v {
					t.Errorf("%s toggles ls: %s is %q, want %q", name, k, got[k], v)
				}
			}
		}
	})

	t.Run("enqueue checks the kind's fields", func(t *testing.T) {
		for _, tc := range []struct {
			args  []string
			wants []string
		}{
			{[]string{"invoice.charge.v1", `{"invoice_id": "7"}`}, []string{"invoice_id"}},
			{[]string{"invoice.charge.v1", `{"invoice_id": 7, "card_number": "4242"}`}, []string{"card_number"}},
			{[]string{"invoice.chrage.v1", `{"invoice_id": 7}`}, []string{"invoice.charge.v1"}},
			{[]string{"invoice.charge.v1", `{"invoice_id": 7}`, "--queue", "invoces"}, []string{"invoices", "--force"}},
			{[]string{"invoice.charge.v1", `[7]`}, []string{"not an object"}},
		} {
			team, stock := w.both(2, append([]string{"enqueue"}, tc.args...)...)
			for _, want := range tc.wants {
				if !strings.Contains(team.stderr, want) || !strings.Contains(stock.stderr, want) {
					t.Errorf("enqueue %q does not mention %q:\nshop:  %s\ntwice: %s", tc.args, want, team.stderr, stock.stderr)
				}
			}
		}
	})

	// The sensitive kind: run by the worker, redacted by both CLIs.
	reset, queue := w.enqueue(w.stock, "account.reset.v1", `{"account_id": 7, "reset_token": "s3cr3t"}`)
	if queue != "accounts" {
		t.Errorf("the stock CLI put account.reset.v1 in queue %q, not its catalogued %q", queue, "accounts")
	}
	wk.wait(t, "reset account 7")
	t.Run("jobs show and --json redact the sensitive field", func(t *testing.T) {
		for _, run := range []func(...string) result{w.team, w.stock} {
			j := w.show(run, reset)
			if j.Kind != "account.reset.v1" || strings.Contains(string(j.Args), "s3cr3t") || len(j.ArgsRedacted) != 1 {
				t.Errorf("jobs show --json of the sensitive kind: %+v (args %s)", j, j.Args)
			}
			for _, args := range [][]string{{"jobs", "show", strconv.FormatInt(reset, 10)}, {"jobs", "--json"}, {"jobs", "--json", "--show-args"}} {
				if r := run(args...); r.code != 0 || strings.Contains(r.stdout, "s3cr3t") || !strings.Contains(r.stdout, "[redacted]") {
					t.Errorf("%q shows the sensitive field or fails (exit %d):\n%s%s", args, r.code, r.stdout, r.stderr)
				}
			}
		}
	})

	// The fail-closed kind: held until switched on.
	inv1, queue := w.enqueue(w.stock, "invoice.charge.v1", `{"invoice_id": 1}`)
	if queue != "invoices" || w.show(w.team, inv1).MaxAttempts != 5 {
		t.Errorf("the stock CLI's invoice job: queue %q, max attempts %d", queue, w.show(w.team, inv1).MaxAttempts)
	}
	if r := w.stock("toggles", "set", "invoice.charge.v1", "on", "--reason", "billing live", "--by", "ops@shop"); r.code != 0 ||
		!strings.Contains(r.stdout, "invoice.charge.v1 on (store by ops@shop") {
		t.Fatalf("toggles set on: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	wk.wait(t, "charged invoice 1")
	t.Run("toggles history", func(t *testing.T) {
		team, stock := w.both(0, "toggles", "history", "invoice.charge.v1")
		for _, r := range []result{team, stock} {
			if !strings.Contains(r.stdout, "none → on") || !strings.Contains(r.stdout, "ops@shop") || !strings.Contains(r.stdout, `"billing live"`) {
				t.Errorf("toggles history:\n%s", r.stdout)
			}
		}
		w.both(2, "toggles", "history", "invoice.chrage.v1")
	})

	t.Run("cancel", func(t *testing.T) {
		later, _ := w.enqueue(w.team, "invoice.charge.v1", `{"invoice_id": 2}`, "--delay", "1h")
		if j := w.show(w.stock, later); !j.Scheduled {
			t.Errorf("a job due in an hour is not shown as scheduled: %+v", j)
		}
		if r := w.stock("jobs", "cancel", strconv.FormatInt(later, 10), "--reason", "order withdrawn"); r.stdout != fmt.Sprintf("job %d: cancelled\n", later) {
			t.Errorf("jobs cancel: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		if j := w.show(w.team, later); j.State != "cancelled" {
			t.Errorf("cancelled job is %s", j.State)
		}
		w.both(1, "jobs", "cancel", strconv.FormatInt(later, 10))
		w.both(1, "jobs", "cancel", strconv.FormatInt(inv1, 10)) // completed
	})

	t.Run("cancel a running job in the worker's process", func(t *testing.T) {
		id, _ := w.enqueue(w.team, "account.reset.v1", `{"account_id": 99, "reset_token": "t"}`)
		wk.wait(t, "resetting account 99")
		r := w.stock("jobs", "cancel", strconv.FormatInt(id, 10), "--reason", "hung")
		asked := time.Now()
		if !strings.HasPrefix(r.stdout, fmt.Sprintf("job %d: cancel requested", id)) {
			t.Fatalf("cancel of the running job: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		wk.wait(t, "cancelled a running account.reset.v1 job")
		t.Logf("cancel reached the handler in the worker's process and was recorded %s after the CLI asked", time.Since(asked).Round(time.Millisecond))
		if j := w.show(w.team, id); j.State != "cancelled" {
			t.Errorf("the cancelled running job is %s", j.State)
		}
	})

	t.Run("queue pause", func(t *testing.T) {
		if r := w.team("queues", "pause", "invoices", "--reason", "ledger freeze", "--until", "1h"); r.code != 0 {
			t.Fatalf("queues pause: %s", r.stderr)
		}
		w.both(2, "queues", "pause", "invocies", "--reason", "typo")
		held, _ := w.enqueue(w.team, "invoice.charge.v1", `{"invoice_id": 3}`)
		team, stock := w.both(0, "queues", "ls", "--json")
		for _, r := range []result{team, stock} {
			var qs []struct {
				Name   string   `json:"name"`
				Paused bool     `json:"paused"`
				Due    int      `json:"due"`
				Nodes  []string `json:"nodes"`
			}
			if err := json.Unmarshal([]byte(r.stdout), &qs); err != nil {
				t.Fatal(err)
			}
			for _, q := range qs {
				if q.Name == "invoices" && (!q.Paused || len(q.Nodes) != 1) {
					t.Errorf("queues ls: invoices is %+v, want paused with the worker's node", q)
				}
			}
		}
		if r := w.stock("queues", "resume", "invoices"); r.code != 0 {
			t.Fatalf("queues resume: %s", r.stderr)
		}
		wk.wait(t, "charged invoice 3") // held by the pause, worked once it lifted
		if j := w.show(w.stock, held); j.State == "available" {
			t.Errorf("job %d still available after the worker ran it", held)
		}
	})
	wk.stop(t)

	t.Run("orphans and retry once the worker is gone", func(t *testing.T) {
		waiting, _ := w.enqueue(w.team, "invoice.charge.v1", `{"invoice_id": 4}`)
		team, stock := w.both(0, "orphans", "--json")
		for _, r := range []result{team, stock} {
			var o struct {
				Kinds []struct {
					Kind  string `json:"kind"`
					Count int    `json:"count"`
				} `json:"orphaned_kinds"`
				Queues []struct {
					Queue string `json:"queue"`
					Count int    `json:"count"`
				} `json:"stranded_queues"`
			}
			if err := json.Unmarshal([]byte(r.stdout), &o); err != nil {
				t.Fatal(err)
			}
			if len(o.Kinds) != 1 || o.Kinds[0].Kind != "invoice.charge.v1" || len(o.Queues) != 1 || o.Queues[0].Queue != "invoices" {
				t.Errorf("orphans --json with the worker stopped: %+v", o)
			}
		}
		w.both(1, "jobs", "retry", strconv.FormatInt(waiting, 10)) // waiting, not dead
		r := w.stock("jobs", "cancel", strconv.FormatInt(waiting, 10))
		if r.code != 0 {
			t.Fatalf("cancel: %s", r.stderr)
		}
		if r := w.team("jobs", "retry", strconv.FormatInt(waiting, 10)); r.stdout != fmt.Sprintf("job %d: retried\n", waiting) {
			t.Errorf("retry of the cancelled job: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		if j := w.show(w.stock, waiting); j.State != "available" {
			t.Errorf("retried job is %s", j.State)
		}
	})

	t.Run("stock serve and dashboard leave the database alone", func(t *testing.T) {
		before := snapshot(t, db)
		r := w.stock("serve")
		if r.code != 2 || !strings.Contains(r.stderr, "twicecli.Main") {
			t.Errorf("stock serve: exit %d\n%s", r.code, r.stderr)
		}
		runDashboard(t, db)
		if after := snapshot(t, db); after != before {
			t.Errorf("the stock binary changed the database:\nbefore:\n%s\nafter:\n%s", before, after)
		}
		if !strings.Contains(before, "twice_toggles: invoice.charge.v1 true") {
			t.Errorf("the snapshot misses the stored switch:\n%s", before)
		}
	})
}

// runDashboard serves the stock dashboard on db until it has answered a
// page, then stops it as SIGINT does.
func runDashboard(t *testing.T, db string) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	out := &signalWriter{want: "dashboard: http://", seen: make(chan struct{})}
	done := make(chan int, 1)
	go func() {
		done <- cli.Main(ctx, cli.Options{Demo: cli.DemoCommand}, []string{"dashboard", "--db", db, "--addr", "127.0.0.1:0", "--log-level", "error"}, out, out)
	}()
	waitfor.RecvBefore(t, out.seen, done, "the stock dashboard to start", out.String)
	cancel()
	if code := waitfor.Recv(t, done, "the stock dashboard to stop"); code != 0 {
		t.Errorf("stock dashboard exited %d:\n%s", code, out.String())
	}
}

type signalWriter struct {
	mu    sync.Mutex
	b     strings.Builder
	want  string
	seen  chan struct{}
	fired bool
}

func (s *signalWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, err := s.b.Write(p)
	if !s.fired && strings.Contains(s.b.String(), s.want) {
		s.fired = true
		close(s.seen)
	}
	return n, err
}

func (s *signalWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// snapshot lists db's tables, stored switches and switch history, as the
// drivers store them.
func snapshot(t *testing.T, db string) string {
	t.Helper()
	queries := []string{
		`SELECT 'twice_toggles: ' || kind || ' ' || CAST(enabled = 1 AS TEXT) || ' ' || set_by || ' ' || reason FROM twice_toggles ORDER BY kind`,
		`SELECT 'twice_toggle_history: ' || CAST(count(*) AS TEXT) FROM twice_toggle_history`,
		`SELECT 'twice_queue_pauses: ' || CAST(count(*) AS TEXT) FROM twice_queue_pauses`,
	}
	var rows [][]string
	if strings.HasPrefix(db, "postgres") {
		pool, err := pgxpool.New(t.Context(), db)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		queries[0] = strings.Replace(queries[0], "CAST(enabled = 1 AS TEXT)", "CAST(enabled AS TEXT)", 1)
		queries = append(queries, `SELECT 'table ' || table_name FROM information_schema.tables WHERE table_schema = current_schema() ORDER BY 1`)
		for _, q := range queries {
			r, err := pool.Query(t.Context(), q)
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for r.Next() {
				var s string
				if err := r.Scan(&s); err != nil {
					t.Fatal(err)
				}
				out = append(out, s)
			}
			r.Close()
			rows = append(rows, out)
		}
	} else {
		sdb, err := sql.Open("sqlite", "file:"+db+"?mode=ro")
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = sdb.Close() }()
		queries[0] = strings.Replace(queries[0], "CAST(enabled = 1 AS TEXT)", "CASE enabled WHEN 1 THEN 'true' ELSE 'false' END", 1)
		queries = append(queries, `SELECT type || ' ' || name FROM sqlite_master ORDER BY 1`)
		for _, q := range queries {
			r, err := sdb.QueryContext(t.Context(), q)
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for r.Next() {
				var s string
				if err := r.Scan(&s); err != nil {
					t.Fatal(err)
				}
				out = append(out, s)
			}
			if err := r.Err(); err != nil {
				t.Fatal(err)
			}
			_ = r.Close()
			rows = append(rows, out)
		}
	}
	var b strings.Builder
	for _, r := range rows {
		b.WriteString(strings.Join(r, "\n") + "\n")
	}
	return b.String()
}
