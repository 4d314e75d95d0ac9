package twiceweb_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/testkit/waitfor"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
	"github.com/twicejobs/twice/twiceweb"
)

func TestPagesRender(t *testing.T) {
	t.Parallel()
	testPagesRender(t, newEnv(t))
}

func TestPostgresPagesRender(t *testing.T) {
	t.Parallel()
	testPagesRender(t, newPostgresEnv(t))
}

func testPagesRender(t *testing.T, e *env) {
	srv := httptest.NewServer(e.handler(twiceweb.Options{}))
	defer srv.Close()
	b := newBrowser(t, srv.URL)
	// Before the worker starts, its scheduler has not ticked: the schedule
	// shows as this binary's, with no tick. (Once it runs, a tick may come
	// at any second.)
	if status, body := b.get("/recurring"); status != http.StatusOK || !strings.Contains(body, `<tr data-schedule="money-sweep"><td>money-sweep</td><td><code>web.money.v1</code></td><td><code>@every 1s</code></td>
<td>this binary</td>
<td>-</td>`) {
		t.Errorf("GET /recurring before any tick: %d, want 200 with the registered schedule and no tick in:\n%s", status, body)
	}
	e.start()
	id := e.dead(1)
	for _, tc := range []struct{ path, want string }{
		{"/", `data-count="dead">1<`},
		{"/jobs", "web.boom.v1"},
		{"/jobs?state=dead&kind=web.boom.v1", "/jobs/" + strconv.FormatInt(id, 10)},
		{"/jobs/" + strconv.FormatInt(id, 10), "boom: the provider said no"},
		{"/dead", "Retry all 1 matching"},
		{"/switches", "web.money.v1"},
		{"/orphans", "no orphaned kinds"},
		{"/markers?handler=web.ok.v1&key=nope", "not processed"},
	} {
		status, body := b.get(tc.path)
		if status != http.StatusOK || !strings.Contains(body, tc.want) {
			t.Errorf("GET %s: %d, want 200 with %q in:\n%s", tc.path, status, tc.want, body)
		}
	}
	_, body := b.get("/jobs/" + strconv.FormatInt(id, 10))
	if strings.Contains(body, "hunter2") || !strings.Contains(body, "[redacted]") {
		t.Errorf("job page does not redact the sensitive field:\n%s", body)
	}

	e.await("a skipped tick", func() bool {
		res, err := e.store.ScheduleTicks(t.Context(), &twicestore.ScheduleTicksParams{Name: "money-sweep"})
		return err == nil && len(res.Ticks) > 0
	})
	if _, body := b.get("/recurring"); !strings.Contains(body, `data-ticks="money-sweep"`) || !strings.Contains(body, `class="tick outcome-skipped"`) {
		t.Errorf("the recurring page does not show the skipped ticks:\n%s", body)
	}

	ok := e.enqueue(okArgs{N: 7}) // ClaimAfter: its marker is claimed with its completion
	e.await("ok job to complete", func() bool { return e.state(ok) == twicetype.JobStateCompleted })
	j, err := e.store.JobGet(t.Context(), &twicestore.JobGetParams{ID: ok})
	if err != nil {
		t.Fatal(err)
	}
	_, body = b.get("/markers?" + url.Values{"handler": {"web.ok.v1"}, "key": {j.Key}}.Encode())
	if !strings.Contains(body, ">processed<") || !strings.Contains(body, `/jobs/`+strconv.FormatInt(ok, 10)+`"`) {
		t.Errorf("marker page does not show the processed key and its claimant job %d:\n%s", ok, body)
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	srv := httptest.NewServer(e.handler(twiceweb.Options{}))
	defer srv.Close()
	b := newBrowser(t, srv.URL)
	for _, tc := range []struct {
		path   string
		status int
		want   string
	}{
		{"/jobs?state=bogus", 400, `state &#34;bogus&#34; is not a job state`},
		{"/jobs?before=-3", 400, "is not a job id"},
		{"/jobs/abc", 400, "is not a job id"},
		{"/jobs/999999", 404, "not found"},
		{"/markers?handler=web.ok.v1", 400, "needs both a handler"},
		{"/nope", 404, ""},
	} {
		status, body := b.get(tc.path)
		if status != tc.status || !strings.Contains(body, tc.want) {
			t.Errorf("GET %s: %d, want %d with %q in:\n%s", tc.path, status, tc.status, tc.want, body)
		}
	}
	for _, tc := range []struct {
		action string
		form   url.Values
		want   string
	}{
		{"/switches/set", url.Values{"kind": {"web.ok.v1"}, "state": {"off"}}, "a reason is required"},
		{"/switches/set", url.Values{"kind": {"web.ok.v1"}, "state": {"maybe"}, "reason": {"x"}}, "not a switch state"},
		{"/switches/set", url.Values{"kind": {"web.ko.v1"}, "state": {"off"}, "reason": {"x"}}, "did you mean web.ok.v1?"},
		{"/dead/retry", url.Values{}, "no job selected"},
		{"/dead/retry", url.Values{"id": {"x"}}, "is not a job id"},
		{"/dead/discard", url.Values{"id": {"1"}, "all": {"yes"}}, "not both"},
	} {
		status, body := b.post("/switches", tc.action, tc.form)
		if status != http.StatusBadRequest || !strings.Contains(body, tc.want) {
			t.Errorf("POST %s %v: %d, want 400 with %q in:\n%s", tc.action, tc.form, status, tc.want, body)
		}
	}
}

func TestRetryAndDiscardNeedConfirmation(t *testing.T) {
	t.Parallel()
	testRetryAndDiscard(t, newEnv(t))
}

func TestPostgresRetryAndDiscard(t *testing.T) {
	t.Parallel()
	testRetryAndDiscard(t, newPostgresEnv(t))
}

func testRetryAndDiscard(t *testing.T, e *env) {
	e.start()
	a, c := e.dead(1), e.dead(2)
	srv := httptest.NewServer(e.handler(twiceweb.Options{}))
	defer srv.Close()
	b := newBrowser(t, srv.URL)

	form := url.Values{"id": {strconv.FormatInt(a, 10)}, "reason": {"provider fixed"}}
	status, body := b.post("/dead", "/dead/retry", form)
	if status != http.StatusOK || !strings.Contains(body, "Retry dead job") || e.state(a) != twicetype.JobStateDead {
		t.Fatalf("unconfirmed retry: %d, state %s; want the confirmation page and the job still dead:\n%s", status, e.state(a), body)
	}
	form.Set("confirm", "yes")
	if status, body = b.post("/dead", "/dead/retry", form); status != http.StatusOK {
		t.Fatalf("confirmed retry: %d\n%s", status, body)
	}
	// The worker runs, so the retried job may already have failed again:
	// dead with a second error is a retry too.
	if row, err := e.store.JobGet(t.Context(), &twicestore.JobGetParams{ID: a}); err != nil {
		t.Fatal(err)
	} else if row.State == twicetype.JobStateDead && len(row.Errors) < 2 {
		t.Fatalf("job %d still dead, with %d error, after a confirmed retry", a, len(row.Errors))
	}
	if logs := e.logs.String(); !strings.Contains(logs, "retry dead jobs") || !strings.Contains(logs, `reason="provider fixed"`) ||
		!strings.Contains(logs, "who=anonymous@127.0.0.1") {
		t.Errorf("the retry was not logged with who, what and why:\n%s", logs)
	}

	e.await("job to die again", func() bool { return e.state(a) == twicetype.JobStateDead })
	b.post("/dead", "/dead/discard", url.Values{"id": {strconv.FormatInt(c, 10)}, "confirm": {"yes"}})
	status, body = b.post("/dead", "/dead/discard", url.Values{"id": {strconv.FormatInt(c, 10)}, "confirm": {"yes"}})
	if status != http.StatusConflict || !strings.Contains(body, "is discarded: job is not dead") {
		t.Errorf("discarding a job twice: %d, want 409 saying it is discarded already:\n%s", status, body)
	}
	status, body = b.post("/dead", "/dead/discard", url.Values{"all": {"yes"}, "kind": {"web.boom.v1"}, "confirm": {"yes"}})
	if status != http.StatusOK {
		t.Fatalf("discard all: %d\n%s", status, body)
	}
	for _, id := range []int64{a, c} {
		if s := e.state(id); s != twicetype.JobStateDiscarded {
			t.Errorf("job %d is %s after discard all, want discarded", id, s)
		}
	}
}

func TestCSRFAndReadOnly(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	srv := httptest.NewServer(e.handler(twiceweb.Options{}))
	defer srv.Close()
	b := newBrowser(t, srv.URL)
	b.get("/switches") // sets the nonce cookie
	form := url.Values{"kind": {"web.ok.v1"}, "state": {"off"}, "reason": {"x"}}
	if status, body := b.postRaw("/switches/set", form); status != http.StatusForbidden || !strings.Contains(body, "no CSRF token") {
		t.Errorf("POST without a CSRF token: %d, want 403:\n%s", status, body)
	}
	form.Set("csrf", strings.Repeat("ab", 32))
	if status, _ := b.postRaw("/switches/set", form); status != http.StatusForbidden {
		t.Errorf("POST with a forged CSRF token: %d, want 403", status)
	}
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/switches/set", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	resp, err := b.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close() // read nothing: only the status matters
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("cross-site POST: %d, want 403", resp.StatusCode)
	}
	if status, _ := b.get("/switches/set"); status != http.StatusMethodNotAllowed {
		t.Errorf("GET of an action: %d, want 405", status)
	}

	ro := httptest.NewServer(e.handler(twiceweb.Options{ReadOnly: true}))
	defer ro.Close()
	rb := newBrowser(t, ro.URL)
	if _, body := rb.get("/switches"); strings.Contains(body, "Switch off") {
		t.Error("a read-only dashboard shows the switch buttons")
	}
	if status, body := rb.postRaw("/switches/set", form); status != http.StatusForbidden || !strings.Contains(body, "read-only") {
		t.Errorf("POST to a read-only dashboard: %d, want 403 saying read-only:\n%s", status, body)
	}
}

func TestFailClosedNeedsConfirmation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	srv := httptest.NewServer(e.handler(twiceweb.Options{}))
	defer srv.Close()
	b := newBrowser(t, srv.URL)
	form := url.Values{"kind": {"web.money.v1"}, "state": {"on"}, "reason": {"ledger migrated"}}
	status, body := b.post("/switches", "/switches/set", form)
	if status != http.StatusOK || !strings.Contains(body, "a fail-closed kind?") {
		t.Fatalf("turning a fail-closed kind on: %d, want a confirmation:\n%s", status, body)
	}
	if _, body = b.get("/switches"); !strings.Contains(body, `data-state="web.money.v1">off<`) {
		t.Fatal("the fail-closed kind was switched on before confirmation")
	}
	form.Set("confirm", "yes")
	b.post("/switches", "/switches/set", form)
	if _, body = b.get("/switches"); !strings.Contains(body, `data-state="web.money.v1">on<`) {
		t.Fatalf("the fail-closed kind is not on after confirmation:\n%s", body)
	}
}

func TestAuth(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if _, err := twiceweb.Listen("0.0.0.0:0", e.handler(twiceweb.Options{})); !errors.Is(err, twiceweb.ErrNeedsAuth) {
		t.Fatalf("Listen on 0.0.0.0 without auth: %v, want ErrNeedsAuth", err)
	}
	c, err := twice.NewClient(e.store, twice.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := twiceweb.New(c, twiceweb.Options{BasicAuth: &twiceweb.BasicAuth{User: "ops"}}); err == nil {
		t.Fatal("New accepted basic auth without a password")
	}
	h := e.handler(twiceweb.Options{BasicAuth: &twiceweb.BasicAuth{User: "ops", Password: "s3cret"}, BearerToken: "tok"})
	ln, err := twiceweb.Listen("0.0.0.0:0", h)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	ctx, cancel := contextWithCancel(t)
	go func() { done <- twiceweb.Serve(ctx, ln, h) }()
	defer func() {
		cancel()
		if err := waitfor.Recv(t, done, "Serve to return after shutdown"); err != nil {
			t.Errorf("Serve after shutdown: %v", err)
		}
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	base := "http://127.0.0.1:" + port
	cl := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for _, tc := range []struct {
		name   string
		set    func(*http.Request)
		status int
	}{
		{"none", func(*http.Request) {}, 401},
		{"wrong password", func(r *http.Request) { r.SetBasicAuth("ops", "nope") }, 401},
		{"basic", func(r *http.Request) { r.SetBasicAuth("ops", "s3cret") }, 200},
		{"wrong token", func(r *http.Request) { r.Header.Set("Authorization", "Bearer nope") }, 401},
		{"token", func(r *http.Request) { r.Header.Set("Authorization", "Bearer tok") }, 200},
	} {
		req, _ := http.NewRequest(http.MethodGet, base+"/", nil)
		tc.set(req)
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close() // read nothing: only the status matters
		if resp.StatusCode != tc.status {
			t.Errorf("%s: %d, want %d", tc.name, resp.StatusCode, tc.status)
		}
	}
	hook := e.handler(twiceweb.Options{Authenticate: func(r *http.Request) (string, error) {
		if r.Header.Get("X-User") == "" {
			return "", errors.New("no X-User")
		}
		return r.Header.Get("X-User"), nil
	}})
	rec := httptest.NewRecorder()
	hook.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if rec.Code != http.StatusUnauthorized {
		t.Errorf("hook refusing: %d, want 401", rec.Code)
	}
	rec = httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.Header.Set("X-User", "ada")
	hook.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "ada") {
		t.Errorf("hook accepting: %d, want 200 naming ada", rec.Code)
	}
}

func TestMountedUnderPrefix(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	mux := http.NewServeMux()
	mux.Handle("/admin/twice/", http.StripPrefix("/admin/twice", e.handler(twiceweb.Options{})))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	b := newBrowser(t, srv.URL)
	status, body := b.get("/admin/twice/")
	if status != http.StatusOK || !strings.Contains(body, `href="/admin/twice/jobs"`) || !strings.Contains(body, `/admin/twice/assets/style.css`) {
		t.Fatalf("GET under a prefix: %d; links do not carry the prefix:\n%s", status, body)
	}
	if status, _ := b.get("/admin/twice/assets/app.js"); status != http.StatusOK {
		t.Errorf("asset under a prefix: %d", status)
	}
}

func TestIsLoopback(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]bool{
		"127.0.0.1:8090": true, "localhost:1": true, "[::1]:80": true, "127.9.9.9:1": true,
		":8090": false, "0.0.0.0:80": false, "10.0.0.1:80": false, "example.com:80": false, "nonsense": false,
	} {
		if got := twiceweb.IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

// oldBoomArgs is web.boom.v1 as a worker built before the deploy that
// tagged its Password sensitive has it.
type oldBoomArgs struct {
	N        int
	Password string `twice:"allow"`
}

func (oldBoomArgs) Kind() string { return "web.boom.v1" }

// TestJobPageRedactsWhatAnyPublisherMarks (issue 20 #3): during a rolling
// deploy that tags a field sensitive, an old worker publishes the kind
// after a new one. The stock dashboard (no registry) still redacts the
// field, because the store keeps a recent publisher's flag; and the new
// binary's dashboard redacts it even over a catalog entry without the
// flag (an old worker of a release that did not keep flags), because its
// own registry says so.
func TestJobPageRedactsWhatAnyPublisherMarks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start()
	id := e.dead(1)

	oldReg := twice.NewRegistry()
	twice.MustRegister(oldReg, twice.HandlerFunc[oldBoomArgs](func(context.Context, *twice.Job[oldBoomArgs]) error {
		return nil
	}), &twice.KindOpts{Strategy: twice.None, Queue: "old-idle"})
	old, err := twice.NewClient(e.store, twice.Config{Registry: oldReg, NodeID: "old-worker",
		Queues: []twice.QueueConfig{{Name: "old-idle"}}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := old.Shutdown(context.Background(), 0); err != nil {
			t.Errorf("stop the old worker: %v", err)
		}
	})

	page := "/jobs/" + strconv.FormatInt(id, 10)
	stock := httptest.NewServer(e.handlerWith(nil, twiceweb.Options{}))
	defer stock.Close()
	if _, body := newBrowser(t, stock.URL).get(page); strings.Contains(body, "hunter2") || !strings.Contains(body, "[redacted]") {
		t.Errorf("after an old worker published over the new one, the stock dashboard shows the field a new worker marks sensitive:\n%s", body)
	}

	// A worker of a release that kept no flags publishes last.
	if err := e.store.CatalogPublish(t.Context(), &twicestore.CatalogPublishParams{Node: "older-release", Kinds: []twicetype.KindInfo{{
		Kind: "web.boom.v1", Queue: twice.QueueDefault,
		Args: []twicetype.ArgField{{Name: "N", Type: twicetype.ArgTypeInteger}, {Name: "Password", Type: twicetype.ArgTypeString}},
	}}}); err != nil {
		t.Fatal(err)
	}
	own := httptest.NewServer(e.handler(twiceweb.Options{}))
	defer own.Close()
	if _, body := newBrowser(t, own.URL).get(page); strings.Contains(body, "hunter2") || !strings.Contains(body, "[redacted]") {
		t.Errorf("the dashboard shows a field its own binary marks sensitive:\n%s", body)
	}
}
