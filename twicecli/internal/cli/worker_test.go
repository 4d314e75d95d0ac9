package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/testkit/waitfor"
	"github.com/twicejobs/twice/twicecli/internal/demo"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
	"github.com/twicejobs/twice/twiceweb"
)

// waitFinished polls the store at db (a SQLite file or a postgres:// URL)
// until the job reaches a terminal state.
func waitFinished(t *testing.T, db string, id int64) *twicetype.JobRow {
	t.Helper()
	store := openTestStore(t, db)
	var j *twicetype.JobRow
	waitfor.Cond(t, fmt.Sprintf("job %d to finish", id), func() bool {
		var err error
		if j, err = store.JobGet(t.Context(), &twicestore.JobGetParams{ID: id}); err != nil {
			t.Fatal(err)
		}
		return j.State.Finished()
	}, func() string { return string(j.State) })
	return j
}

// reportArgs is a kind of the team whose CLI TestServe builds: the demo's
// kinds are the stock binary's, and its serve works none of them.
type reportArgs struct {
	ReportID int64 `json:"report_id"`
}

func (reportArgs) Kind() string { return "report.build.v1" }

func TestServe(t *testing.T) {
	t.Parallel()
	testServe(t, newSetup(t))
}

// testServe starts the serve of a CLI built with a registry of its own on
// s's database, with extra arguments, checks it works two jobs with the
// registry's handler, in the kind's own queue, and stops it the way SIGINT
// does.
func testServe(t *testing.T, s *setup, extra ...string) {
	t.Helper()
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[reportArgs](func(_ context.Context, j *twice.Job[reportArgs]) error {
		return twice.NoOp(fmt.Sprintf("report %d built", j.Args.ReportID))
	}), &twice.KindOpts{Queue: "reports"}) // no Config: serve works the kind's queue all the same
	opts := Options{Registry: reg}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	args := append([]string{"serve", "--db", s.db, "--grace", "5s"}, extra...)
	go func() { done <- Main(ctx, opts, args, &stdout, &stderr) }()

	var ids []int64
	for _, a := range []string{`{"report_id": 1}`, `{"report_id": 2}`} {
		r := runWith(t, t.Context(), opts, "enqueue", "report.build.v1", a, "--db", s.db)
		m := enqueuedID.FindStringSubmatch(r.stdout)
		if r.code != ExitOK || m == nil {
			t.Fatalf("enqueue: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		id, _ := strconv.ParseInt(m[1], 10, 64)
		ids = append(ids, id)
	}
	for i, id := range ids {
		j := waitFinished(t, s.db, id)
		if want := fmt.Sprintf("report %d built", i+1); j.State != twicetype.JobStateCompleted || j.Note != want {
			t.Errorf("job %d: %s %q, want completed %q", id, j.State, j.Note, want)
		}
	}

	cancel() // what SIGINT does through twicecli.Main's signal.NotifyContext
	if code := waitfor.Recv(t, done, "serve to stop after its context was cancelled"); code != ExitOK {
		t.Errorf("serve exited %d after cancellation, want 0\n%s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "twice worker stopped") {
		t.Errorf("serve did not log its stop:\n%s", stderr.String())
	}
	if !strings.Contains(stdout.String(), "serving report.build.v1") {
		t.Errorf("serve did not say what it serves:\n%s", stdout.String())
	}
}

func TestDemoOnce(t *testing.T) {
	t.Parallel()
	s := &setup{t: t, db: filepath.Join(t.TempDir(), "demo.db")}
	r := s.ok("demo", "--once")
	for _, want := range []string{"converged: every effect is what its strategy promises",
		"email.partner-verification.v1", "balance.credit.v1", "ads.image-watermark.v1", "DELIVERIES"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("demo --once output lacks %q:\n%s", want, r.stdout)
		}
	}
	// With --db, the database is kept for inspection.
	var jobs []jobJSON
	if err := json.Unmarshal([]byte(s.ok("jobs", "--json", "--limit", "100").stdout), &jobs); err != nil || len(jobs) < 30 {
		t.Errorf("jobs after demo --once: %d jobs (%v)", len(jobs), err)
	}
	for _, j := range jobs {
		if j.State != twicetype.JobStateCompleted {
			t.Errorf("job %d is %s after a converged demo", j.ID, j.State)
		}
	}
}

func TestDemoLive(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "demo.db")
	out := testDemoLive(t, db)
	for _, want := range []string{"twice jobs --db " + db, "twice dlq ls", "demo_outbox", "effects so far"} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
}

// testDemoLive runs the live demo on db until its fourth signup, stops it
// the way Ctrl-C does, and returns what it printed.
func testDemoLive(t *testing.T, db string, extra ...string) string {
	t.Helper()
	// Port 0: parallel tests never fight over the default ports.
	out := runDemoLive(t, append([]string{"--db", db, "--dashboard", "127.0.0.1:0", "--http", "127.0.0.1:0"}, extra...)...)
	if !strings.Contains(out, "dashboard: http://127.0.0.1:") {
		t.Errorf("the demo does not say where its dashboard is:\n%s", out)
	}
	return out
}

// runDemoLive runs the live demo with args until its fourth signup and
// stops it the way Ctrl-C does; it returns what the demo printed.
func runDemoLive(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stdout := &syncBuffer{wait: "signup user004", seen: make(chan struct{})}
	done := make(chan int, 1)
	args = append([]string{"demo", "--interval", "20ms", "--log-level", "error"}, args...)
	go func() {
		done <- Main(ctx, Options{Demo: DemoCommand}, args, stdout, io.Discard)
	}()
	waitfor.RecvBefore(t, stdout.seen, done, "the fourth signup", stdout.String)
	cancel()
	if code := waitfor.Recv(t, done, "the demo to stop after its context was cancelled"); code != ExitOK {
		t.Errorf("demo exited %d after Ctrl-C, want 0:\n%s", code, stdout.String())
	}
	return stdout.String()
}

// TestDemoGoesOnWhenTheDashboardPortIsTaken: the demo's default dashboard
// address is a convenience; a port already in use there does not stop the
// demo, it says so.
func TestDemoGoesOnWhenTheDashboardPortIsTaken(t *testing.T) {
	t.Parallel()
	if ln, err := net.Listen("tcp", twiceweb.AddrDefault); err == nil {
		defer func() { _ = ln.Close() }()
	} // else something holds it already, which is the case under test too
	out := runDemoLive(t, "--db", filepath.Join(t.TempDir(), "demo.db"), "--http", "127.0.0.1:0")
	if !strings.Contains(out, "dashboard: not served") {
		t.Errorf("the demo does not say its dashboard is not served:\n%s", out)
	}
}

// TestDemoAPIPortTaken: the demo's default API address is a convenience,
// so a port in use there does not stop the demo; an address given with
// --http that cannot be served is an error.
func TestDemoAPIPortTaken(t *testing.T) {
	t.Parallel()
	t.Run("default", func(t *testing.T) {
		if ln, err := net.Listen("tcp", demo.HTTPAddrDefault); err == nil {
			defer func() { _ = ln.Close() }()
		} // else something holds it already, which is the case under test too
		out := runDemoLive(t, "--db", filepath.Join(t.TempDir(), "demo.db"), "--dashboard", "127.0.0.1:0")
		if !strings.Contains(out, "demo API: not served") {
			t.Errorf("the demo does not say its API is not served:\n%s", out)
		}
	})
	t.Run("explicit", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = ln.Close() }()
		s := &setup{t: t, db: filepath.Join(t.TempDir(), "demo.db")}
		wantError(t, s.run("demo", "--http", ln.Addr().String(), "--dashboard", ""), ExitFailure,
			"serve the demo API on "+ln.Addr().String(), "pass --http with a free address")
	})
}

// syncBuffer is a buffer written by a running command and read by the
// test; seen is closed once the output contains wait.
type syncBuffer struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	wait  string
	seen  chan struct{}
	fired bool
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.buf.Write(p)
	if b.seen != nil && !b.fired && strings.Contains(b.buf.String(), b.wait) {
		close(b.seen)
		b.fired = true
	}
	return n, err
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// testAdminCommands runs the admin commands on s's server database (named
// server in the messages): enqueue, jobs, jobs show, dlq ls, orphans, and
// an unknown kind refused as bad input.
func testAdminCommands(t *testing.T, s *setup, server string) {
	t.Helper()
	r := s.ok("enqueue", "ads.image-watermark.v1", `{"image_id": 7}`)
	if !strings.Contains(r.stdout, "enqueued job") {
		t.Fatalf("enqueue: %q", r.stdout)
	}
	r = s.ok("jobs", "--json")
	var jobs []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &jobs); err != nil || len(jobs) != 1 {
		t.Fatalf("jobs --json = %q (%v), want one job", r.stdout, err)
	}
	s.ok("jobs", "show", fmt.Sprint(jobs[0]["id"]))
	s.ok("dlq", "ls")
	r = s.ok("orphans")
	if !strings.Contains(r.stdout, "ads.image-watermark.v1") {
		t.Errorf("orphans does not list the waiting kind no worker handles: %q", r.stdout)
	}
	if r := s.run("enqueue", "ads.image-watermark.v2", `{}`); r.code != ExitUsage {
		t.Errorf("unknown kind on %s: exit %d, want %d", server, r.code, ExitUsage)
	}
}

// testServeAndDemo runs serve, demo --once and the live demo on s's server
// database (named server in the messages): the demo's kinds and its
// application tables work there; liveWants are what the live demo must
// print besides what it prints on every database.
func testServeAndDemo(t *testing.T, s *setup, server string, liveWants ...string) {
	t.Helper()
	testServe(t, s)

	r := s.ok("demo", "--once", "--objects", t.TempDir())
	for _, want := range []string{"converged: every effect is what its strategy promises",
		"email.partner-verification.v1", "balance.credit.v1", "ads.image-watermark.v1"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("demo --once on %s lacks %q:\n%s", server, want, r.stdout)
		}
	}
	// The run used --db: its jobs are there for inspection.
	var jobs []jobJSON
	if err := json.Unmarshal([]byte(s.ok("jobs", "--json", "--limit", "100").stdout), &jobs); err != nil || len(jobs) < 30 {
		t.Errorf("jobs after demo --once on %s: %d jobs (%v)", server, len(jobs), err)
	}

	out := testDemoLive(t, s.db, "--objects", t.TempDir())
	for _, want := range append([]string{"twice dlq ls", "demo_outbox", "effects so far"}, liveWants...) {
		if !strings.Contains(out, want) {
			t.Errorf("live demo on %s lacks %q:\n%s", server, want, out)
		}
	}
}
