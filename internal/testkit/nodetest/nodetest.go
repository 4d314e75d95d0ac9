// Package nodetest runs worker processes for the tests that prove twice's
// promises across crashes and failovers (internal/clustertest,
// internal/failovertest): the test binary starts copies of itself as
// workers, kills them with SIGKILL or stops them with SIGTERM, and each
// worker runs a client on PostgreSQL (or the store Worker.Open opens)
// until told to stop. The tests keep
// their kinds, their checks and what each worker's environment says.
package nodetest

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicepg"
	"github.com/twicejobs/twice/twicestore"
)

// stopWithin bounds a worker's drain after SIGTERM, in the worker and in
// the test waiting for it.
const stopWithin = 30 * time.Second

// Processes are one test's worker processes. The zero value is not
// usable: build it with New.
type Processes struct {
	t testing.TB
	// env marks a process as a worker: the test binary's TestMain runs the
	// worker when it is set.
	env  string
	mu   sync.Mutex
	list []*Process
}

// Process is one worker process.
type Process struct {
	Node   string
	cmd    *exec.Cmd
	stderr *lockedBuffer
	exited chan error
}

// Stderr is what the worker wrote to its stderr so far.
func (p *Process) Stderr() string { return p.stderr.String() }

// New returns t's processes, which set workerEnv=1 in each worker's
// environment, and stops those still running when t ends.
func New(t testing.TB, workerEnv string) *Processes {
	ps := &Processes{t: t, env: workerEnv}
	t.Cleanup(ps.StopAll)
	return ps
}

// Start runs a worker process: this test binary, running no test, told by
// its environment (env, "NAME=value" each) to be a worker.
func (ps *Processes) Start(node string, env ...string) *Process {
	ps.t.Helper()
	p := &Process{Node: node, stderr: &lockedBuffer{}, exited: make(chan error, 1)}
	p.cmd = exec.Command(os.Args[0], "-test.run=^$")
	p.cmd.Env = append(append(os.Environ(), ps.env+"=1"), env...)
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		ps.t.Fatalf("start worker %s: %v", node, err)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	ps.mu.Lock()
	ps.list = append(ps.list, p)
	ps.mu.Unlock()
	return p
}

// Kill ends a worker with SIGKILL (no drain, no outcome written, leases
// left to expire) and waits for it to exit.
func (ps *Processes) Kill(p *Process) {
	ps.t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		ps.t.Fatalf("kill %s: %v", p.Node, err)
	}
	err := <-p.exited
	ps.t.Logf("%s killed: %v", p.Node, err)
}

// StopAll stops the running workers with SIGTERM, so each drains; a worker
// that fails or does not stop fails the test.
func (ps *Processes) StopAll() {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for _, p := range ps.list {
		if p.cmd.ProcessState != nil {
			continue
		}
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-p.exited:
			if err != nil && !strings.Contains(err.Error(), "killed") {
				ps.t.Errorf("worker %s exited: %v\n%s", p.Node, err, p.Stderr())
			}
		case <-time.After(stopWithin):
			_ = p.cmd.Process.Kill()
			ps.t.Errorf("worker %s did not stop on SIGTERM", p.Node)
		}
	}
}

// LogStderr logs each worker's stderr, its last lines lines when lines > 0.
func (ps *Processes) LogStderr(lines int) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for _, p := range ps.list {
		s := p.Stderr()
		if lines > 0 {
			if all := strings.Split(strings.TrimRight(s, "\n"), "\n"); len(all) > lines {
				s = strings.Join(all[len(all)-lines:], "\n")
			}
		}
		ps.t.Logf("worker %s stderr:\n%s", p.Node, s)
	}
}

// lockedBuffer is a worker's stderr, written by exec's copier and read by
// the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Worker is a worker process's client.
type Worker struct {
	// URL is the database (with its search_path, or a multi-host URL).
	URL    string
	Logger *slog.Logger
	// Open opens the worker's store on URL. When nil the store is
	// twicepg's, and Config is given a pgx pool on URL.
	Open func(ctx context.Context, url string) (twicestore.Store, error)
	// Config returns the client's configuration; pool is a pool on URL
	// for the handlers' effects, or nil when Open is set (the handlers
	// then reach their database their own way). Its Logger is set to
	// Logger.
	Config func(pool *pgxpool.Pool) twice.Config
	// Stop stops the client after SIGTERM; (*twice.Client).Stop when nil.
	Stop func(client *twice.Client, ctx context.Context) error
}

// Run is the whole life of a worker process: work until SIGTERM (or
// SIGINT), then drain and return the process's exit code. A SIGKILL ends
// it anywhere, which is the point.
func (w Worker) Run() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	open := w.Open
	if open == nil {
		open = func(ctx context.Context, url string) (twicestore.Store, error) { return twicepg.Open(ctx, url) }
	}
	store, err := open(ctx, w.URL)
	if err != nil {
		w.Logger.Error("worker: open store", "err", err)
		return 1
	}
	defer func() {
		if err := store.Close(); err != nil {
			w.Logger.Warn("worker: close store", "err", err)
		}
	}()
	var pool *pgxpool.Pool
	if w.Open == nil {
		pool, err = pgxpool.New(ctx, w.URL)
		if err != nil {
			w.Logger.Error("worker: open pool", "err", err)
			return 1
		}
		defer pool.Close()
	}
	cfg := w.Config(pool)
	cfg.Logger = w.Logger
	client, err := twice.NewClient(store, cfg)
	if err != nil {
		w.Logger.Error("worker: new client", "err", err)
		return 1
	}
	if err := client.Start(ctx); err != nil {
		w.Logger.Error("worker: start", "err", err)
		return 1
	}
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.Background(), stopWithin)
	defer cancel()
	stopFn := w.Stop
	if stopFn == nil {
		stopFn = (*twice.Client).Stop
	}
	if err := stopFn(client, stopCtx); err != nil {
		w.Logger.Error("worker: stop", "err", err)
		return 1
	}
	return 0
}
