package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicecli/internal/demo"
	"github.com/twicejobs/twice/twicesqlite"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// finishJob completes a running job through the store, as its worker
// would.
func finishJob(t *testing.T, path string, id int64) {
	t.Helper()
	store, err := twicesqlite.Open(context.Background(), path)
	if err != nil {
		t.Error(err)
		return
	}
	defer func() { _ = store.Close() }()
	j, err := store.JobGet(context.Background(), &twicestore.JobGetParams{ID: id})
	if err != nil {
		t.Error(err)
		return
	}
	res, err := store.JobFinish(context.Background(), &twicestore.JobFinishParams{Outcomes: []*twicestore.JobOutcome{{
		ID: id, Epoch: j.Epoch, State: twicetype.JobStateCompleted, FinishedAt: time.Now()}}})
	if err != nil || !res.Applied[0] {
		t.Errorf("finish job %d: %v %+v", id, err, res)
	}
}

// TestKindsDrain (issue 25 item 4): the report and its verdict, exit 1
// while something holds the kind and 0 once nothing does, --json, bad
// input as usage errors, and --wait returning once the last job finishes.
func TestKindsDrain(t *testing.T) {
	t.Parallel()
	s := newSetup(t)

	// Nothing of the kind anywhere but this binary's registry: safe.
	r := s.ok("kinds", "drain", emailKind)
	if !strings.HasSuffix(r.stdout, "\nsafe to remove\n") || !strings.Contains(r.stdout, "kind "+emailKind+"\n") {
		t.Errorf("drain of an empty kind printed:\n%s", r.stdout)
	}

	// One job delayed at enqueue holds it: exit 1, the verdict names it.
	later := s.enqueue(emailKind, `{"user_id": 1}`, "--delay", "1h")
	r = s.run("kinds", "drain", emailKind)
	verdict := fmt.Sprintf("not safe: 1 scheduled (job %d)", later)
	wantError(t, r, ExitFailure, "kind "+emailKind+" is "+verdict)
	if !strings.HasSuffix(r.stdout, "\n"+verdict+"\n") || !strings.Contains(r.stdout, fmt.Sprintf("scheduled       1  (job %d)", later)) {
		t.Errorf("drain with a scheduled job printed:\n%s", r.stdout)
	}
	r = s.run("kinds", "drain", emailKind, "--json")
	var rep twice.KindDrainReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("--json: %v\n%s", err, r.stdout)
	}
	if r.code != ExitFailure || rep.Safe || rep.Scheduled != 1 || rep.Reason != verdict || rep.JobIDs["scheduled"][0] != later {
		t.Errorf("--json: exit %d, report %+v", r.code, rep)
	}
	s.ok("jobs", "cancel", fmt.Sprint(later), "--reason", "retiring v1")
	s.ok("kinds", "drain", emailKind)

	// Bad input: exit 2, with the closest kind.
	wantError(t, s.run("kinds", "drain", "email.partner-verificaton.v1"), ExitUsage, "in no catalog", "did you mean "+emailKind)
	wantError(t, s.run("kinds", "drain"), ExitUsage, "KIND")
	wantError(t, s.run("kinds", "drain", emailKind, "--interval", "0s"), ExitUsage, "--interval")
	wantError(t, s.run("kinds"), ExitUsage, "drain")

	// --wait returns once the last running job finishes: it reports the
	// running job first (a progress line on stderr), then, once the job
	// completes through the store, the verdict.
	running := runningJob(t, s)
	reg, err := demo.NewRegistry(nil)
	if err != nil {
		t.Fatal(err)
	}
	stderr := &progressWriter{first: make(chan struct{})}
	var stdout bytes.Buffer
	code := make(chan int, 1)
	go func() {
		code <- Main(t.Context(), Options{Registry: reg}, []string{"kinds", "drain", "ads.image-watermark.v1", "--wait", "--interval", "20ms", "--db", s.db}, &stdout, stderr)
	}()
	<-stderr.first
	if p := stderr.String(); !strings.Contains(p, fmt.Sprintf("not safe: 1 running (job %d)", running)) {
		t.Errorf("--wait's progress line: %q", p)
	}
	finishJob(t, s.db, running)
	if c := <-code; c != ExitOK || !strings.HasSuffix(stdout.String(), "safe to remove\n") {
		t.Errorf("--wait: exit %d\nstdout: %s\nstderr: %s", c, stdout.String(), stderr.String())
	}
}

// TestKindsDrainWaitCancel: Ctrl-C (the context ending) stops a --wait
// that would never end, with exit 1 and a line saying so.
func TestKindsDrainWaitCancel(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	later := s.enqueue(emailKind, `{"user_id": 1}`, "--delay", "1h")
	reg, err := demo.NewRegistry(nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stderr := &progressWriter{first: make(chan struct{})}
	var stdout bytes.Buffer
	code := make(chan int, 1)
	go func() {
		code <- Main(ctx, Options{Registry: reg}, []string{"kinds", "drain", emailKind, "--wait", "--interval", "10ms", "--db", s.db}, &stdout, stderr)
	}()
	<-stderr.first // the wait is under way: it printed its first progress line
	cancel()
	if c := <-code; c != ExitFailure || !strings.Contains(stderr.String(), "stopped waiting") ||
		!strings.Contains(stderr.String(), fmt.Sprintf("(job %d)", later)) {
		t.Errorf("cancelled --wait: exit %d\nstderr: %s", c, stderr.String())
	}
}

// progressWriter collects what a command writes to stderr and closes
// first on its first write.
type progressWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	first chan struct{}
	once  sync.Once
}

func (w *progressWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.once.Do(func() { close(w.first) })
	return w.buf.Write(p)
}

func (w *progressWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}
