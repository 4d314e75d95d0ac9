package twiceweb_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/testkit/pgtest"
	"github.com/twicejobs/twice/internal/testkit/waitfor"
	"github.com/twicejobs/twice/twicepg"
	"github.com/twicejobs/twice/twicesqlite"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
	"github.com/twicejobs/twice/twiceweb"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// boomArgs always fail: their jobs go straight to the dead letters.
type boomArgs struct {
	N        int
	Password string `twice:"sensitive"`
}

func (boomArgs) Kind() string { return "web.boom.v1" }

// okArgs complete.
type okArgs struct{ N int }

func (okArgs) Kind() string { return "web.ok.v1" }

// slowArgs run until their context ends.
type slowArgs struct{ N int }

func (slowArgs) Kind() string { return "web.slow.v1" }

// moneyArgs are fail-closed.
type moneyArgs struct{ N int }

func (moneyArgs) Kind() string { return "web.money.v1" }

// env is one test's store, runtime and dashboard.
type env struct {
	t      *testing.T
	store  twicestore.Store
	reg    *twice.Registry
	client *twice.Client
	logs   *syncBuffer
	ran    chan int // N of every okArgs job run
	// started gets the id of every slowArgs job that starts; ended the
	// cause of its context once it ends.
	started chan int64
	ended   chan error
}

// newEnv is an env on a fresh SQLite store.
func newEnv(t *testing.T) *env {
	t.Helper()
	store, err := twicesqlite.Open(t.Context(), filepath.Join(t.TempDir(), "twice.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := store.Close(); err != nil {
			t.Error(err)
		}
	})
	return newEnvOn(t, store)
}

// newPostgresEnv is an env in a schema of its own on TWICE_TEST_POSTGRES;
// it skips without the variable.
func newPostgresEnv(t *testing.T) *env {
	t.Helper()
	url, _ := pgtest.Schema(t, "twiceweb")
	store, err := twicepg.Open(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := store.Close(); err != nil {
			t.Error(err)
		}
	})
	return newEnvOn(t, store)
}

func newEnvOn(t *testing.T, store twicestore.Store) *env {
	t.Helper()
	e := &env{t: t, store: store, reg: twice.NewRegistry(), logs: &syncBuffer{}, ran: make(chan int, 100),
		started: make(chan int64, 10), ended: make(chan error, 10)}
	twice.MustRegister(e.reg, twice.HandlerFunc[boomArgs](func(context.Context, *twice.Job[boomArgs]) error {
		return twice.Permanent(errors.New("boom: the provider said no"))
	}), &twice.KindOpts{Strategy: twice.None})
	twice.MustRegister(e.reg, twice.HandlerFunc[okArgs](func(_ context.Context, j *twice.Job[okArgs]) error {
		e.ran <- j.Args.N
		return nil
	}), nil)
	twice.MustRegister(e.reg, twice.HandlerFunc[slowArgs](func(ctx context.Context, j *twice.Job[slowArgs]) error {
		e.started <- j.ID
		<-ctx.Done()
		e.ended <- context.Cause(ctx)
		return ctx.Err()
	}), &twice.KindOpts{Strategy: twice.None})
	twice.MustRegister(e.reg, twice.HandlerFunc[moneyArgs](func(context.Context, *twice.Job[moneyArgs]) error {
		return nil
	}), &twice.KindOpts{Strategy: twice.None, FailClosed: true})
	// Fail-closed and never switched on here: every tick is skipped.
	e.reg.MustSchedule("money-sweep", "@every 1s", moneyArgs{}, nil)
	return e
}

// start starts a worker on the env's store.
func (e *env) start() {
	e.t.Helper()
	e.startWith(0)
}

// startWith starts a worker whose leases last lease (0 for the default):
// its heartbeat, which brings cancels on SQLite, beats every third of it.
func (e *env) startWith(lease time.Duration) {
	e.t.Helper()
	c, err := twice.NewClient(e.store, twice.Config{
		Registry: e.reg, PollInterval: 20 * time.Millisecond, TogglePollInterval: 50 * time.Millisecond,
		Backoff:       func(int) time.Duration { return time.Millisecond },
		LeaseDuration: lease,
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := c.Start(e.t.Context()); err != nil {
		e.t.Fatal(err)
	}
	e.client = c
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := c.Stop(ctx); err != nil {
			e.t.Errorf("stop the worker: %v", err)
		}
	})
}

// enqueue enqueues args and returns the job id.
func (e *env) enqueue(args twice.Args) int64 {
	e.t.Helper()
	c := e.client
	if c == nil {
		var err error
		if c, err = twice.NewClient(e.store, twice.Config{Registry: e.reg}); err != nil {
			e.t.Fatal(err)
		}
	}
	res, err := c.Enqueue(e.t.Context(), args, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	return res.Job.ID
}

// await polls the store until cond holds, failing after a timeout.
func (e *env) await(what string, cond func() bool) {
	e.t.Helper()
	waitfor.Cond(e.t, what, cond, nil)
}

func (e *env) state(id int64) twicetype.JobState {
	e.t.Helper()
	j, err := e.store.JobGet(context.Background(), &twicestore.JobGetParams{ID: id})
	if err != nil {
		e.t.Fatal(err)
	}
	return j.State
}

// dead enqueues a failing job and waits until it is dead.
func (e *env) dead(n int) int64 {
	e.t.Helper()
	id := e.enqueue(boomArgs{N: n, Password: "hunter2"})
	e.await("job to die", func() bool { return e.state(id) == twicetype.JobStateDead })
	return id
}

// handler builds the dashboard with opts on top of the env's defaults,
// over a client of the env's registry that is not started, as a
// dashboard-only binary runs it.
func (e *env) handler(opts twiceweb.Options) *twiceweb.Handler {
	e.t.Helper()
	return e.handlerWith(e.reg, opts)
}

// handlerWith builds the dashboard over a client of reg (nil for none).
func (e *env) handlerWith(reg *twice.Registry, opts twiceweb.Options) *twiceweb.Handler {
	e.t.Helper()
	logger := slog.New(slog.NewTextHandler(e.logs, nil))
	opts.Logger = logger
	c, err := twice.NewClient(e.store, twice.Config{Registry: reg, Logger: logger})
	if err != nil {
		e.t.Fatal(err)
	}
	h, err := twiceweb.New(c, opts)
	if err != nil {
		e.t.Fatal(err)
	}
	return h
}

// browser is an HTTP client with cookies, like a browser without JS.
type browser struct {
	t    *testing.T
	base string
	c    *http.Client
}

func newBrowser(t *testing.T, base string) *browser {
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Transport: &http.Transport{}}
	t.Cleanup(c.CloseIdleConnections)
	return &browser{t: t, base: base, c: c}
}

// get fetches a page and returns its status and body.
func (b *browser) get(path string) (int, string) {
	b.t.Helper()
	resp, err := b.c.Get(b.base + path)
	if err != nil {
		b.t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }() // read to the end below
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// post submits a form from page (whose CSRF token it carries) and returns
// the final status and body.
func (b *browser) post(page, action string, form url.Values) (int, string) {
	b.t.Helper()
	_, body := b.get(page)
	m := csrfRE.FindStringSubmatch(body)
	if m == nil {
		b.t.Fatalf("page %s has no CSRF token", page)
	}
	form.Set("csrf", m[1])
	return b.postRaw(action, form)
}

func (b *browser) postRaw(action string, form url.Values) (int, string) {
	b.t.Helper()
	resp, err := b.c.PostForm(b.base+action, form)
	if err != nil {
		b.t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }() // read to the end below
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// syncBuffer is a log sink tests read while handlers write.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func contextWithCancel(t *testing.T) (context.Context, context.CancelFunc) {
	return context.WithCancel(t.Context())
}
