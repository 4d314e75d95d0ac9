package twicehttp_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/twicejobs/twice/internal/testkit/pgtest"
	"github.com/twicejobs/twice/internal/testkit/waitfor"
	"github.com/twicejobs/twice/twicehttp"
	"github.com/twicejobs/twice/twicepg"
	"github.com/twicejobs/twice/twicesqlite"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// openFunc opens a fresh store for one test and closes it when it ends.
type openFunc func(t *testing.T) twicestore.Store

func openSQLite(t *testing.T) twicestore.Store {
	t.Helper()
	s, err := twicesqlite.Open(t.Context(), filepath.Join(t.TempDir(), "twice.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

func openPostgres(t *testing.T) twicestore.Store {
	t.Helper()
	url, _ := pgtest.Schema(t, "twice_http")
	s, err := twicepg.Open(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

func TestSQLite(t *testing.T) {
	t.Parallel()
	runSuite(t, openSQLite)
}

func TestPostgres(t *testing.T) {
	t.Parallel()
	runSuite(t, openPostgres)
}

// fixture is one test's middleware around a counting handler.
type fixture struct {
	h     http.Handler
	store twicestore.Store
	calls atomic.Int64
}

// handlerFunc is what the wrapped handler does on each call, after it was
// counted.
type handlerFunc func(w http.ResponseWriter, r *http.Request, call int64)

// echo answers 201 with a header and the request body, so replays can be
// compared byte for byte.
func echo(w http.ResponseWriter, r *http.Request, call int64) {
	var b bytes.Buffer
	_, _ = b.ReadFrom(r.Body)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Call", fmt.Sprint(call))
	w.Header().Add("X-Multi", "a")
	w.Header().Add("X-Multi", "b")
	w.WriteHeader(http.StatusCreated)
	_, _ = fmt.Fprintf(w, `{"call":%d,"echo":%q}`, call, b.String())
}

// setup wraps fn in the middleware over a new store; opts.Principal
// defaults to the X-User header.
func setup(t *testing.T, open openFunc, opts twicehttp.Options, fn handlerFunc) *fixture {
	t.Helper()
	if opts.Principal == nil {
		opts.Principal = func(r *http.Request) (string, error) {
			if u := r.Header.Get("X-User"); u != "" {
				return u, nil
			}
			return "", errors.New("no X-User")
		}
	}
	f := &fixture{}
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fn(w, r, f.calls.Add(1))
	})
	f.store = open(t)
	f.h = twicehttp.Middleware(f.store, opts)(next)
	return f
}

// record reads the stored record of (user, key) back: a Begin of a key
// that is held or done returns its record and changes nothing.
func (f *fixture) record(t *testing.T, user, key string) twicetype.IdempotencyRecord {
	t.Helper()
	res, err := f.store.IdempotencyBegin(t.Context(), &twicestore.IdempotencyBeginParams{
		Principal: user, Key: key, Fingerprint: "read back", Now: time.Now(),
		ExpiresAt: time.Now().Add(time.Hour), StaleAfter: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Taken {
		t.Fatalf("no record of %s's key %q", user, key)
	}
	return res.Record
}

// logRecorder keeps the messages logged through it.
type logRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logRecorder) WithGroup(string) slog.Handler            { return l }

func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, r.Message)
	return nil
}

func (l *logRecorder) messages() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.msgs)
}

// extendSpy passes each lock refresh through and reports the new lock.
type extendSpy struct {
	twicestore.Store
	extended chan time.Time
}

func (s *extendSpy) IdempotencyExtend(ctx context.Context, p *twicestore.IdempotencyExtendParams) (*twicestore.IdempotencyExtendResult, error) {
	res, err := s.Store.IdempotencyExtend(ctx, p)
	if err == nil {
		select {
		case s.extended <- res.LockedAt:
		default:
		}
	}
	return res, err
}

// request builds a request; key "" sends no Idempotency-Key header.
func request(t *testing.T, method, target, user, key, body string) *http.Request {
	t.Helper()
	r := httptest.NewRequestWithContext(t.Context(), method, target, strings.NewReader(body))
	if user != "" {
		r.Header.Set("X-User", user)
	}
	if key != "" {
		r.Header.Set(twicehttp.HeaderKey, key)
	}
	return r
}

func (f *fixture) do(r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	f.h.ServeHTTP(w, r)
	return w
}

// wantProblem checks w is a problem+json answer with status.
func wantProblem(t *testing.T, w *httptest.ResponseRecorder, status int) map[string]any {
	t.Helper()
	if w.Code != status {
		t.Fatalf("status = %d, want %d; body %s", w.Code, status, w.Body)
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type = %q, want application/problem+json", ct)
	}
	var p map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatalf("problem body %s: %v", w.Body, err)
	}
	for _, k := range []string{"type", "title", "detail"} {
		if s, _ := p[k].(string); s == "" {
			t.Errorf("problem has no %s: %s", k, w.Body)
		}
	}
	if p["status"] != float64(status) {
		t.Errorf("problem status = %v, want %d", p["status"], status)
	}
	return p
}

func (f *fixture) wantCalls(t *testing.T, n int64) {
	t.Helper()
	if got := f.calls.Load(); got != n {
		t.Fatalf("handler ran %d times, want %d", got, n)
	}
}

// blocker is a handler that signals it started and waits to be released.
type blocker struct {
	started chan struct{}
	release chan struct{}
}

func newBlocker() *blocker {
	return &blocker{started: make(chan struct{}, 100), release: make(chan struct{})}
}

func (b *blocker) handle(w http.ResponseWriter, r *http.Request, call int64) {
	b.started <- struct{}{}
	<-b.release
	echo(w, r, call)
}

func runSuite(t *testing.T, open openFunc) {
	t.Run("FirstRunsAndReplayIsIdentical", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open, twicehttp.Options{}, echo)
		first := f.do(request(t, "POST", "/orders?x=1", "alice", `"k-1"`, `{"n":1}`))
		if first.Code != http.StatusCreated || first.Header().Get(twicehttp.HeaderReplayed) != "" {
			t.Fatalf("first: %d %v", first.Code, first.Header())
		}
		exp, err := http.ParseTime(first.Header().Get(twicehttp.HeaderExpires))
		if err != nil || exp.Before(time.Now().Add(23*time.Hour)) {
			t.Fatalf("%s = %q (%v), want about 24 h ahead", twicehttp.HeaderExpires, first.Header().Get(twicehttp.HeaderExpires), err)
		}
		// The bare token form is the same key.
		replay := f.do(request(t, "POST", "/orders?x=1", "alice", `k-1`, `{"n":1}`))
		f.wantCalls(t, 1)
		if replay.Code != first.Code || replay.Body.String() != first.Body.String() {
			t.Fatalf("replay %d %q, want %d %q", replay.Code, replay.Body, first.Code, first.Body)
		}
		if got := replay.Header().Get(twicehttp.HeaderReplayed); got != "true" {
			t.Fatalf("%s = %q, want true", twicehttp.HeaderReplayed, got)
		}
		h := replay.Header().Clone()
		h.Del(twicehttp.HeaderReplayed)
		if fmt.Sprint(h) != fmt.Sprint(first.Header()) {
			t.Fatalf("replay headers %v, want %v", h, first.Header())
		}
	})

	t.Run("DifferentRequestSameKeyIs422", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open, twicehttp.Options{}, echo)
		f.do(request(t, "POST", "/orders", "alice", `"k"`, `{"n":1}`))
		for _, r := range []*http.Request{
			request(t, "POST", "/orders", "alice", `"k"`, `{"n":2}`),
			request(t, "POST", "/orders?again", "alice", `"k"`, `{"n":1}`),
			request(t, "PATCH", "/orders", "alice", `"k"`, `{"n":1}`),
		} {
			wantProblem(t, f.do(r), http.StatusUnprocessableEntity)
		}
		f.wantCalls(t, 1)
	})

	t.Run("InProgressIs409", func(t *testing.T) {
		t.Parallel()
		b := newBlocker()
		f := setup(t, open, twicehttp.Options{}, b.handle)
		done := make(chan *httptest.ResponseRecorder)
		go func() { done <- f.do(request(t, "POST", "/", "alice", `"k"`, "x")) }()
		waitfor.Recv(t, b.started, "first handler")
		w := f.do(request(t, "POST", "/", "alice", `"k"`, "x"))
		wantProblem(t, w, http.StatusConflict)
		if w.Header().Get("Retry-After") == "" {
			t.Error("409 without Retry-After")
		}
		close(b.release)
		if first := waitfor.Recv(t, done, "first response"); first.Code != http.StatusCreated {
			t.Fatalf("first: %d", first.Code)
		}
		if w := f.do(request(t, "POST", "/", "alice", `"k"`, "x")); w.Header().Get(twicehttp.HeaderReplayed) != "true" {
			t.Fatalf("after completion: %d %v, want a replay", w.Code, w.Header())
		}
		f.wantCalls(t, 1)
	})

	t.Run("MissingKey", func(t *testing.T) {
		t.Parallel()
		required := setup(t, open, twicehttp.Options{Required: true}, echo)
		wantProblem(t, required.do(request(t, "POST", "/", "alice", "", "x")), http.StatusBadRequest)
		required.wantCalls(t, 0)
		// Methods outside Methods pass through even when required.
		if w := required.do(request(t, "GET", "/", "alice", "", "")); w.Code != http.StatusCreated {
			t.Fatalf("GET: %d", w.Code)
		}
		optional := setup(t, open, twicehttp.Options{}, echo)
		for range 2 {
			if w := optional.do(request(t, "POST", "/", "", "", "x")); w.Code != http.StatusCreated {
				t.Fatalf("no key, not required: %d %s", w.Code, w.Body)
			}
		}
		optional.wantCalls(t, 2)
	})

	t.Run("InvalidKey", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open, twicehttp.Options{}, echo)
		for _, key := range []string{
			`"unterminated`, `"a"b`, `"\x"`, `""`, `a b`, `é`, `"a";p=1`,
			`"` + strings.Repeat("k", 256) + `"`, strings.Repeat("k", 256),
		} {
			p := wantProblem(t, f.do(request(t, "POST", "/", "alice", key, "x")), http.StatusBadRequest)
			if d, _ := p["detail"].(string); !strings.Contains(d, "255") {
				t.Errorf("key %q: detail %q does not say what a valid key is", key, d)
			}
		}
		r := request(t, "POST", "/", "alice", `"a"`, "x")
		r.Header.Add(twicehttp.HeaderKey, `"b"`)
		wantProblem(t, f.do(r), http.StatusBadRequest)
		f.wantCalls(t, 0)
		// The longest key and escapes are fine.
		for _, key := range []string{`"` + strings.Repeat("k", 255) + `"`, `"a\"b\\c"`} {
			if w := f.do(request(t, "POST", "/", "alice", key, "x")); w.Code != http.StatusCreated {
				t.Fatalf("key %q: %d %s", key, w.Code, w.Body)
			}
		}
	})

	t.Run("PrincipalsAreIsolated", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open, twicehttp.Options{}, echo)
		a := f.do(request(t, "POST", "/", "alice", `"k"`, "x"))
		b := f.do(request(t, "POST", "/", "bob", `"k"`, "x"))
		f.wantCalls(t, 2)
		if b.Header().Get(twicehttp.HeaderReplayed) != "" || a.Body.String() == b.Body.String() {
			t.Fatalf("bob got alice's response: %s", b.Body)
		}
		// A different body under bob's key is bob's business only.
		wantProblem(t, f.do(request(t, "POST", "/", "bob", `"k"`, "y")), http.StatusUnprocessableEntity)
		if w := f.do(request(t, "POST", "/", "alice", `"k"`, "x")); w.Body.String() != a.Body.String() {
			t.Fatalf("alice's replay %s, want %s", w.Body, a.Body)
		}
		wantProblem(t, f.do(request(t, "POST", "/", "", `"k"`, "x")), http.StatusUnauthorized)
		f.wantCalls(t, 2)
	})

	fail := func(w http.ResponseWriter, _ *http.Request, call int64) {
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = fmt.Fprintf(w, "boom %d", call)
	}
	t.Run("ServerErrorIsReplayedByDefault", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open, twicehttp.Options{}, fail)
		f.do(request(t, "POST", "/", "alice", `"k"`, "x"))
		w := f.do(request(t, "POST", "/", "alice", `"k"`, "x"))
		if w.Code != http.StatusInternalServerError || w.Body.String() != "boom 1" || w.Header().Get(twicehttp.HeaderReplayed) != "true" {
			t.Fatalf("retry: %d %q %v, want the replayed 500", w.Code, w.Body, w.Header())
		}
		f.wantCalls(t, 1)
	})
	t.Run("ServerErrorReleasedOnRequest", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open, twicehttp.Options{ReleaseServerErrors: true}, fail)
		f.do(request(t, "POST", "/", "alice", `"k"`, "x"))
		if w := f.do(request(t, "POST", "/", "alice", `"k"`, "x")); w.Body.String() != "boom 2" {
			t.Fatalf("retry: %d %q, want a second run", w.Code, w.Body)
		}
		f.wantCalls(t, 2)
	})

	t.Run("PanicReleasesKey", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open, twicehttp.Options{}, func(w http.ResponseWriter, r *http.Request, call int64) {
			if call == 1 {
				panic("handler bug")
			}
			echo(w, r, call)
		})
		func() {
			defer func() {
				if v := recover(); v != "handler bug" {
					t.Fatalf("recovered %v, want the handler's panic", v)
				}
			}()
			f.do(request(t, "POST", "/", "alice", `"k"`, "x"))
		}()
		if w := f.do(request(t, "POST", "/", "alice", `"k"`, "x")); w.Code != http.StatusCreated {
			t.Fatalf("retry after panic: %d %s", w.Code, w.Body)
		}
		f.wantCalls(t, 2)
	})

	t.Run("StaleLockIsTakenOver", func(t *testing.T) {
		t.Parallel()
		b := newBlocker()
		logs := &logRecorder{}
		f := setup(t, open, twicehttp.Options{LockTimeout: time.Nanosecond, Logger: slog.New(logs)}, func(w http.ResponseWriter, r *http.Request, call int64) {
			if call == 1 {
				b.handle(w, r, call) // the crashed request: never completes in time
				return
			}
			echo(w, r, call)
		})
		done := make(chan struct{})
		go func() {
			defer close(done)
			f.do(request(t, "POST", "/", "alice", `"k"`, "x"))
		}()
		waitfor.Recv(t, b.started, "first handler")
		w := f.do(request(t, "POST", "/", "alice", `"k"`, "x"))
		close(b.release)
		waitfor.Recv(t, done, "first request")
		if w.Code != http.StatusCreated || w.Header().Get("X-Call") != "2" {
			t.Fatalf("retry of a stale key: %d %v %s, want a second run", w.Code, w.Header(), w.Body)
		}
		f.wantCalls(t, 2)
		// The crashed-looking request, returning late, lost its key: the
		// record is the retry's, whatever its lock refreshes tried.
		if replay := f.do(request(t, "POST", "/", "alice", `"k"`, "x")); replay.Header().Get("X-Call") != "2" || replay.Header().Get(twicehttp.HeaderReplayed) != "true" {
			t.Fatalf("replay after both: %d %v, want the retry's response", replay.Code, replay.Header())
		}
		// The late request's log says its response was not stored and
		// why, not that a retry will run again (the retry already ran).
		msgs := logs.messages()
		if len(msgs) != 1 || !strings.Contains(msgs[0], "response not stored") || !strings.Contains(msgs[0], "a retry took the key") {
			t.Fatalf("logged %q, want one line saying the response was not stored because a retry took the key", msgs)
		}
	})

	t.Run("LockIsRefreshedWhileHandlerRuns", func(t *testing.T) {
		t.Parallel()
		// Before the lock was refreshed, a handler outliving LockTimeout
		// let a retry of the same request take the key and run again.
		const lockTimeout = 600 * time.Millisecond
		spy := &extendSpy{extended: make(chan time.Time, 1000)}
		b := newBlocker()
		f := setup(t, func(t *testing.T) twicestore.Store {
			spy.Store = open(t)
			return spy
		}, twicehttp.Options{LockTimeout: lockTimeout}, b.handle)
		done := make(chan *httptest.ResponseRecorder)
		go func() { done <- f.do(request(t, "POST", "/", "alice", `"k"`, "x")) }()
		waitfor.Recv(t, b.started, "first handler")
		// Begin took the lock before the handler started: wait for a
		// refresh more than LockTimeout after that, when the first lock
		// alone would be stale.
		stale := time.Now().Add(lockTimeout)
		for lock := (time.Time{}); !lock.After(stale); {
			lock = waitfor.Recv(t, spy.extended, "a lock refresh past LockTimeout")
		}
		w := f.do(request(t, "POST", "/", "alice", `"k"`, "x"))
		wantProblem(t, w, http.StatusConflict)
		wantProblem(t, f.do(request(t, "POST", "/", "alice", `"k"`, "other")), http.StatusUnprocessableEntity)
		close(b.release)
		if first := waitfor.Recv(t, done, "first response"); first.Code != http.StatusCreated {
			t.Fatalf("first: %d %s", first.Code, first.Body)
		}
		if w := f.do(request(t, "POST", "/", "alice", `"k"`, "x")); w.Header().Get(twicehttp.HeaderReplayed) != "true" {
			t.Fatalf("after completion: %d %v, want a replay", w.Code, w.Header())
		}
		f.wantCalls(t, 1)
	})

	t.Run("StaleLockNotTakenByDifferentRequest", func(t *testing.T) {
		t.Parallel()
		// Before, a different body took a stale key over and ran; the
		// original client then got 422 for its own retry.
		b := newBlocker()
		f := setup(t, open, twicehttp.Options{LockTimeout: time.Nanosecond}, func(w http.ResponseWriter, r *http.Request, call int64) {
			if call == 1 {
				b.handle(w, r, call) // the request that looks crashed
				return
			}
			echo(w, r, call)
		})
		done := make(chan *httptest.ResponseRecorder)
		go func() { done <- f.do(request(t, "POST", "/", "alice", `"k"`, "x")) }()
		waitfor.Recv(t, b.started, "first handler")
		wantProblem(t, f.do(request(t, "POST", "/", "alice", `"k"`, "y")), http.StatusUnprocessableEntity)
		f.wantCalls(t, 1)
		close(b.release)
		if first := waitfor.Recv(t, done, "first response"); first.Code != http.StatusCreated {
			t.Fatalf("first: %d %s", first.Code, first.Body)
		}
		if w := f.do(request(t, "POST", "/", "alice", `"k"`, "x")); w.Header().Get(twicehttp.HeaderReplayed) != "true" || !strings.Contains(w.Body.String(), `"echo":"x"`) {
			t.Fatalf("the original request's retry: %d %s, want its replay", w.Code, w.Body)
		}
		f.wantCalls(t, 1)
	})

	// big writes n bytes of a repeating pattern, 1 KiB at a time.
	big := func(n int) handlerFunc {
		return func(w http.ResponseWriter, _ *http.Request, call int64) {
			w.Header().Set("X-Call", fmt.Sprint(call))
			w.WriteHeader(http.StatusCreated)
			chunk := bytes.Repeat([]byte("0123456789abcdef"), 64)
			for left := n; left > 0; left -= len(chunk) {
				_, _ = w.Write(chunk[:min(left, len(chunk))])
			}
		}
	}
	t.Run("ResponseOverMaxResponseBytesIsSentNotStored", func(t *testing.T) {
		t.Parallel()
		const max, size = 4 << 10, 256 << 10
		f := setup(t, open, twicehttp.Options{MaxResponseBytes: max}, big(size))
		first := f.do(request(t, "POST", "/", "alice", `"k"`, "x"))
		if first.Code != http.StatusCreated || first.Body.Len() != size {
			t.Fatalf("first: %d with %d bytes, want 201 with all %d", first.Code, first.Body.Len(), size)
		}
		rec := f.record(t, "alice", "k")
		if !rec.Done || len(rec.Body) != 0 || len(rec.Header) != 1 {
			t.Fatalf("stored record: done %t, %d body bytes, headers %v; want done, no body, only the not-stored mark",
				rec.Done, len(rec.Body), rec.Header)
		}
		retry := f.do(request(t, "POST", "/", "alice", `"k"`, "x"))
		p := wantProblem(t, retry, http.StatusConflict)
		if p["type"] != "https://pkg.go.dev/github.com/twicejobs/twice/twicehttp#problem-response-not-stored" || p["original_status"] != float64(http.StatusCreated) {
			t.Fatalf("retry: %s, want response-not-stored with original_status 201", retry.Body)
		}
		if retry.Header().Get("Retry-After") != "" {
			t.Error("response-not-stored says Retry-After: retrying cannot help")
		}
		f.wantCalls(t, 1)
	})

	t.Run("ResponseUpToMaxResponseBytesIsStored", func(t *testing.T) {
		t.Parallel()
		const max = 4 << 10
		f := setup(t, open, twicehttp.Options{MaxResponseBytes: max}, big(max))
		first := f.do(request(t, "POST", "/", "alice", `"k"`, "x"))
		replay := f.do(request(t, "POST", "/", "alice", `"k"`, "x"))
		if replay.Header().Get(twicehttp.HeaderReplayed) != "true" || replay.Body.String() != first.Body.String() || first.Body.Len() != max {
			t.Fatalf("replay %d with %d bytes, want the first %d bytes replayed", replay.Code, replay.Body.Len(), first.Body.Len())
		}
		f.wantCalls(t, 1)
	})

	t.Run("ResponseIsStreamed", func(t *testing.T) {
		t.Parallel()
		// The client reads the first line while the handler still waits
		// for it: the middleware holds nothing back.
		read := make(chan struct{})
		f := setup(t, open, twicehttp.Options{MaxResponseBytes: 16}, func(w http.ResponseWriter, r *http.Request, call int64) {
			_, _ = fmt.Fprintln(w, "first line")
			if err := http.NewResponseController(w).Flush(); err != nil {
				t.Errorf("flush: %v", err)
				return
			}
			select {
			case <-read:
			case <-time.After(10 * time.Second):
				return
			}
			big(64<<10)(w, r, call)
		})
		srv := httptest.NewServer(f.h)
		t.Cleanup(srv.Close)
		r, err := http.NewRequestWithContext(t.Context(), "POST", srv.URL, strings.NewReader("x"))
		if err != nil {
			t.Fatal(err)
		}
		r.Header.Set("X-User", "alice")
		r.Header.Set(twicehttp.HeaderKey, `"k"`)
		res, err := srv.Client().Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = res.Body.Close() }()
		br := bufio.NewReader(res.Body)
		if line, err := br.ReadString('\n'); err != nil || line != "first line\n" {
			t.Fatalf("first line %q, %v", line, err)
		}
		close(read)
		rest, err := io.ReadAll(br)
		if err != nil || len(rest) != 64<<10 {
			t.Fatalf("rest: %d bytes, %v; want %d", len(rest), err, 64<<10)
		}
	})

	t.Run("SetCookieAndDropHeadersNotStored", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open, twicehttp.Options{DropHeaders: []string{"x-trace-secret"}}, func(w http.ResponseWriter, _ *http.Request, _ int64) {
			http.SetCookie(w, &http.Cookie{Name: "session", Value: "s3cret"})
			w.Header().Set("X-Trace-Secret", "t")
			w.Header().Set("X-Kept", "k")
			w.Header().Set("Twice-Idempotency-Response-Not-Stored", "1") // the middleware's own mark: never from a handler
			w.WriteHeader(http.StatusCreated)
			_, _ = fmt.Fprint(w, "ok")
		})
		first := f.do(request(t, "POST", "/", "alice", `"k"`, "x"))
		if first.Header().Get("Set-Cookie") == "" || first.Header().Get("X-Trace-Secret") == "" {
			t.Fatalf("first response %v lacks the handler's headers", first.Header())
		}
		rec := f.record(t, "alice", "k")
		for _, h := range []string{"Set-Cookie", "X-Trace-Secret", "Twice-Idempotency-Response-Not-Stored"} {
			if _, ok := rec.Header[h]; ok {
				t.Errorf("stored headers %v include %s", rec.Header, h)
			}
		}
		replay := f.do(request(t, "POST", "/", "alice", `"k"`, "x"))
		if replay.Code != http.StatusCreated || replay.Body.String() != "ok" || replay.Header().Get("X-Kept") != "k" {
			t.Fatalf("replay %d %q %v, want the stored response", replay.Code, replay.Body, replay.Header())
		}
		if replay.Header().Get("Set-Cookie") != "" || replay.Header().Get("X-Trace-Secret") != "" {
			t.Fatalf("replay headers %v include a dropped header", replay.Header())
		}
		f.wantCalls(t, 1)
	})

	t.Run("BodyTooLarge", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open, twicehttp.Options{MaxBodyBytes: 4}, echo)
		wantProblem(t, f.do(request(t, "POST", "/", "alice", `"k"`, "12345")), http.StatusRequestEntityTooLarge)
		r := request(t, "POST", "/", "alice", `"k"`, "12345")
		r.ContentLength = -1 // unknown length: caught while reading
		wantProblem(t, f.do(r), http.StatusRequestEntityTooLarge)
		f.wantCalls(t, 0)
		// Not stored: the same key runs with a body that fits.
		if w := f.do(request(t, "POST", "/", "alice", `"k"`, "1234")); w.Code != http.StatusCreated || !strings.Contains(w.Body.String(), `"1234"`) {
			t.Fatalf("%d %s", w.Code, w.Body)
		}
	})

	t.Run("ConcurrentSameKeyRunsOnce", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open, twicehttp.Options{}, echo)
		const n = 50
		codes := make(chan *httptest.ResponseRecorder, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				<-start
				codes <- f.do(request(t, "POST", "/", "alice", `"k"`, "x"))
			})
		}
		close(start)
		wg.Wait()
		close(codes)
		ran := 0
		for w := range codes {
			switch {
			case w.Code == http.StatusConflict:
			case w.Code == http.StatusCreated && w.Header().Get(twicehttp.HeaderReplayed) == "true":
			case w.Code == http.StatusCreated:
				ran++
			default:
				t.Errorf("unexpected %d %s", w.Code, w.Body)
			}
		}
		if ran != 1 {
			t.Errorf("%d fresh runs, want 1", ran)
		}
		f.wantCalls(t, 1)
	})
}

func TestMiddlewarePanicsOnWiringMistakes(t *testing.T) {
	t.Parallel()
	principal := func(*http.Request) (string, error) { return "p", nil }
	for name, tc := range map[string]struct {
		store twicestore.Store
		opts  twicehttp.Options
	}{
		"nil store":             {nil, twicehttp.Options{Principal: principal}},
		"nil principal":         {storeStub{}, twicehttp.Options{}},
		"negative expiry":       {storeStub{}, twicehttp.Options{Principal: principal, Expiry: -1}},
		"negative max response": {storeStub{}, twicehttp.Options{Principal: principal, MaxResponseBytes: -1}},
		"lock beyond expiry":    {storeStub{}, twicehttp.Options{Principal: principal, Expiry: time.Minute, LockTimeout: time.Hour}},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			twicehttp.Middleware(tc.store, tc.opts)
		})
	}
}

// storeStub satisfies the interface for wiring checks that never reach it.
type storeStub struct{ twicestore.Store }
