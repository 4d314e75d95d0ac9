package twiceweb_test

import (
	"context"
	"errors"
	"html/template"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
	"github.com/twicejobs/twice/twiceweb"
)

// do sends req with the browser's cookies and returns the status, the
// headers and the body.
func (b *browser) do(req *http.Request) (int, http.Header, string) {
	b.t.Helper()
	resp, err := b.c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }() // read to the end below
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(body)
}

// Issue 12 item 1: without authentication, a request whose Host is not
// localhost or loopback — what a browser sends after DNS rebinding — gets
// neither a page nor a CSRF token, and cannot flip a switch even with a
// matching Origin and a token taken from a real page.
func TestDNSRebindingRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	srv := httptest.NewServer(e.handler(twiceweb.Options{}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	port := u.Port()
	b := newBrowser(t, srv.URL)
	evil := "attacker.example:" + port

	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/switches", nil)
	req.Host = evil
	status, hdr, body := b.do(req)
	if status != http.StatusForbidden || !strings.Contains(body, `host "attacker.example" is not localhost or a loopback address`) {
		t.Errorf("GET with Host %s: %d, want 403 naming the host:\n%s", evil, status, body)
	}
	if strings.Contains(body, `name="csrf"`) || hdr.Get("Set-Cookie") != "" {
		t.Errorf("the refused page carries a CSRF token or cookie: %v\n%s", hdr, body)
	}

	// The attacker's page runs in the victim's browser, which has a real
	// cookie and could have read a token if any page had answered it.
	_, page := b.get("/switches")
	token := csrfRE.FindStringSubmatch(page)[1]
	form := url.Values{"kind": {"web.ok.v1"}, "state": {"off"}, "reason": {"rebinding"}, "csrf": {token}}
	req, _ = http.NewRequest(http.MethodPost, srv.URL+"/switches/set", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "http://"+evil)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	req.Host = evil
	if status, _, body := b.do(req); status != http.StatusForbidden {
		t.Errorf("POST /switches/set with Host %s: %d, want 403:\n%s", evil, status, body)
	}
	res, err := e.store.ToggleList(t.Context(), &twicestore.ToggleListParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Toggles) != 0 {
		t.Errorf("the rebinding POST stored a switch: %+v", res.Toggles)
	}

	allowed := e.handler(twiceweb.Options{AllowedHosts: []string{"dash.internal", "*.corp.example"}})
	authed := e.handler(twiceweb.Options{BearerToken: "tok"})
	authedList := e.handler(twiceweb.Options{BearerToken: "tok", AllowedHosts: []string{"dash.internal"}})
	for _, tc := range []struct {
		h    http.Handler
		host string
		want int
	}{
		{allowed, "localhost:" + port, 200},
		{allowed, "LOCALHOST", 200},
		{allowed, "twice.localhost:" + port, 200},
		{allowed, "localhost.:" + port, 200},
		{allowed, "127.0.0.1:" + port, 200},
		{allowed, "127.8.9.10", 200},
		{allowed, "[::1]:" + port, 200},
		{allowed, "[::1]", 200},
		{allowed, "dash.internal:" + port, 200},
		{allowed, "a.corp.example", 200},
		{allowed, "corp.example", 403},
		{allowed, "attacker.example:" + port, 403},
		{allowed, "localhost.attacker.example", 403},
		{allowed, "10.0.0.1:" + port, 403},
		{allowed, "0.0.0.0:" + port, 403},
		{allowed, "", 403},
		{authed, "attacker.example", 200},
		{authedList, "dash.internal", 200},
		{authedList, "attacker.example", 403},
	} {
		req := httptest.NewRequest(http.MethodGet, "/orphans", nil)
		req.Host = tc.host
		req.Header.Set("Authorization", "Bearer tok")
		rec := httptest.NewRecorder()
		tc.h.ServeHTTP(rec, req)
		if rec.Code != tc.want {
			t.Errorf("Host %q: %d, want %d:\n%s", tc.host, rec.Code, tc.want, rec.Body)
		}
	}
}

// badByteRoute is one place a dashboard request carries input: a
// parameter of a page or action, or the path itself (param "").
type badByteRoute struct {
	method, path, param string
	valid               url.Values // the other parameters, valid
}

// badByteRoutes are every page and action with every input it reads,
// plus one unknown parameter on pages that read none.
func badByteRoutes() []badByteRoute {
	dead := url.Values{"id": {"1"}, "kind": {"web.boom.v1"}, "queue": {"default"}, "reason": {"x"}, "all": {""}}
	set := url.Values{"kind": {"web.ok.v1"}, "state": {"off"}, "reason": {"x"}, "for": {"1h"}}
	job := url.Values{"id": {"1"}, "reason": {"x"}, "confirm": {"yes"}}
	pause := url.Values{"queue": {"default"}, "until": {"1h"}, "reason": {"x"}}
	schedule := url.Values{"name": {"money-sweep"}, "reason": {"x"}, "request": {"r"}, "confirm": {"yes"}}
	unset := url.Values{"kind": {"web.ok.v1"}, "reason": {"x"}}
	var routes []badByteRoute
	for _, r := range []struct {
		method, path string
		params       []string
		valid        url.Values
	}{
		{"GET", "/", []string{"x"}, nil},
		{"GET", "/jobs", []string{"state", "kind", "queue", "timing", "node", "before"}, nil},
		{"GET", "/jobs/{}", nil, nil},
		{"GET", "/dead", []string{"kind", "queue", "before"}, nil},
		{"GET", "/queues", []string{"x"}, nil},
		{"GET", "/recurring", []string{"x"}, nil},
		{"GET", "/switches", []string{"x"}, nil},
		{"GET", "/switches/history", []string{"kind", "before"}, nil},
		{"GET", "/orphans", []string{"x"}, nil},
		{"GET", "/markers", []string{"handler", "key"}, url.Values{"handler": {"web.ok.v1"}, "key": {"k"}}},
		{"GET", "/assets/{}", nil, nil},
		{"POST", "/dead/retry", []string{"id", "kind", "queue", "reason", "all"}, dead},
		{"POST", "/dead/discard", []string{"id", "kind", "queue", "reason", "all"}, dead},
		{"POST", "/switches/set", []string{"kind", "state", "reason", "for"}, set},
		{"POST", "/switches/unset", []string{"kind", "reason"}, unset},
		{"POST", "/jobs/cancel", []string{"id", "reason"}, job},
		{"POST", "/jobs/delete", []string{"id", "reason"}, job},
		{"POST", "/jobs/bulk", []string{"action", "id", "all", "page_id", "reason"}, url.Values{"action": {"cancel"}, "id": {"1"}, "all": {"page"}, "page_id": {"1"}, "reason": {"x"}, "confirm": {"yes"}}},
		{"POST", "/queues/pause", []string{"queue", "until", "reason"}, pause},
		{"POST", "/queues/resume", []string{"queue", "reason"}, pause},
		{"POST", "/recurring/remove", []string{"name", "reason"}, schedule},
		{"POST", "/recurring/trigger", []string{"name", "reason", "request"}, schedule},
	} {
		if strings.Contains(r.path, "{}") {
			routes = append(routes, badByteRoute{method: r.method, path: r.path})
		}
		for _, p := range r.params {
			routes = append(routes, badByteRoute{method: r.method, path: r.path, param: p, valid: r.valid})
		}
	}
	return routes
}

// Issue 12 item 2: a NUL byte or invalid UTF-8 in any parameter, path or
// form field is a 400 that says what is wrong, on both drivers (PostgreSQL
// refused such bytes with a raw error and a 500 before), and no page
// shows a driver's error.
func TestBadBytes(t *testing.T) {
	t.Parallel()
	testBadBytes(t, newEnv(t))
}

func TestPostgresBadBytes(t *testing.T) {
	t.Parallel()
	testBadBytes(t, newPostgresEnv(t))
}

func testBadBytes(t *testing.T, e *env) {
	e.start()
	e.dead(1)
	srv := httptest.NewServer(e.handler(twiceweb.Options{}))
	defer srv.Close()
	b := newBrowser(t, srv.URL)
	n := 0
	for _, rt := range badByteRoutes() {
		for bad, want := range map[string]string{"\x00": "contains a NUL byte", "\xff": "is not valid UTF-8"} {
			n++
			name := rt.method + " " + rt.path + " " + rt.param + " " + strconv.Quote(bad)
			path := strings.ReplaceAll(rt.path, "{}", url.PathEscape("1"+bad))
			vals := url.Values{}
			for k, v := range rt.valid {
				vals[k] = v
			}
			if rt.param != "" {
				vals.Set(rt.param, "web"+bad)
			}
			var status int
			var body string
			if rt.method == "GET" {
				status, body = b.get(path + "?" + vals.Encode())
			} else {
				status, body = b.post("/switches", path, vals)
			}
			if status != http.StatusBadRequest || !strings.Contains(body, want) {
				t.Errorf("%s: %d, want 400 saying %q:\n%s", name, status, want, body)
			}
		}
	}
	t.Logf("%d endpoint × input combinations answered 400", n)
	if logs := e.logs.String(); strings.Contains(logs, "level=ERROR") {
		t.Errorf("bad input logged an error:\n%s", logs)
	}
}

// failingList is the real store with JobList failing as a driver would,
// with text a page must not show.
type failingList struct{ twicestore.Store }

func (failingList) JobList(context.Context, *twicestore.JobListParams) (*twicestore.JobListResult, error) {
	return nil, errors.New(`ERROR: invalid byte sequence for encoding "UTF8": 0x00 (SQLSTATE 22021) secret-driver-detail`)
}

// Issue 12 item 2: a store error is a 500 page that says what failed,
// never the driver's text, which goes to the log.
func TestStoreErrorHidden(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.store = failingList{e.store}
	srv := httptest.NewServer(e.handler(twiceweb.Options{}))
	defer srv.Close()
	status, body := newBrowser(t, srv.URL).get("/jobs")
	if status != http.StatusInternalServerError || strings.Contains(body, "secret-driver-detail") || strings.Contains(body, "SQLSTATE") ||
		!strings.Contains(body, "loading the page /jobs failed") {
		t.Errorf("GET /jobs on a failing store: %d, want 500 saying what failed without the driver's text:\n%s", status, body)
	}
	if !strings.Contains(e.logs.String(), "secret-driver-detail") {
		t.Errorf("the driver's error was not logged:\n%s", e.logs.String())
	}
}

// Issue 12 item 3: every response, refusals and assets included, forbids
// MIME sniffing and framing; /assets/ lists nothing.
func TestSecurityHeaders(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	open := e.handler(twiceweb.Options{})
	authed := e.handler(twiceweb.Options{BearerToken: "tok"})
	for _, tc := range []struct {
		h          http.Handler
		path, host string
		want       int
	}{
		{open, "/", "localhost", 200},
		{open, "/assets/style.css", "localhost", 200},
		{open, "/assets/", "localhost", 404},
		{open, "/assets", "localhost", 307}, // to /assets/, a 404
		{open, "/assets/nope.js", "localhost", 404},
		{open, "/nope", "localhost", 404},
		{open, "/jobs?kind=%00", "localhost", 400},
		{open, "/", "attacker.example", 403},
		{authed, "/", "localhost", 401},
	} {
		req := httptest.NewRequest(http.MethodGet, tc.path, nil)
		req.Host = tc.host
		rec := httptest.NewRecorder()
		tc.h.ServeHTTP(rec, req)
		h := rec.Header()
		if rec.Code != tc.want || h.Get("X-Content-Type-Options") != "nosniff" ||
			!strings.Contains(h.Get("Content-Security-Policy"), "frame-ancestors 'none'") || h.Get("X-Frame-Options") != "DENY" {
			t.Errorf("GET %s (Host %s): %d %v; want %d with nosniff, frame-ancestors 'none' and X-Frame-Options DENY",
				tc.path, tc.host, rec.Code, h, tc.want)
		}
		if strings.HasPrefix(tc.path, "/assets") && tc.want == 404 && strings.Contains(rec.Body.String(), "style.css") {
			t.Errorf("GET %s lists the assets:\n%s", tc.path, rec.Body)
		}
	}
}

// Issue 12 item 3: the authentication scheme is case-insensitive (RFC
// 9110, section 11.1).
func TestAuthSchemeCaseInsensitive(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	h := e.handler(twiceweb.Options{BasicAuth: &twiceweb.BasicAuth{User: "ops", Password: "s3cret"}, BearerToken: "tok"})
	basic := "b3BzOnMzY3JldA==" // ops:s3cret
	for auth, want := range map[string]int{
		"Bearer tok": 200, "bearer tok": 200, "BEARER tok": 200, "bEaReR  tok ": 200,
		"Basic " + basic: 200, "basic " + basic: 200, "BASIC " + basic: 200,
		"bearer nope": 401, "Bearertok": 401, "Token tok": 401, "tok": 401,
	} {
		req := httptest.NewRequest(http.MethodGet, "/orphans", nil)
		req.Header.Set("Authorization", auth)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != want {
			t.Errorf("Authorization %q: %d, want %d", auth, rec.Code, want)
		}
	}
}

// Issue 12 item 3: SecureCookie marks the CSRF cookie Secure behind a
// proxy that terminates TLS (the request itself is plain HTTP).
func TestSecureCookie(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for secure, want := range map[bool]bool{false: false, true: true} {
		req := httptest.NewRequest(http.MethodGet, "/switches", nil)
		req.Host = "localhost"
		rec := httptest.NewRecorder()
		e.handler(twiceweb.Options{SecureCookie: secure}).ServeHTTP(rec, req)
		cookies := rec.Result().Cookies()
		if len(cookies) != 1 || cookies[0].Name != "twice_csrf" || cookies[0].Secure != want {
			t.Errorf("SecureCookie %v: cookies %v, want the CSRF cookie with Secure %v", secure, cookies, want)
		}
	}
}

// Issue 12 item 7: a listing of 50 jobs whose stored errors are 1 MiB
// each shows a short first line of each last error and stays under
// 1 MB; the job page shows the stored text.
func TestListingsWithHugeErrors(t *testing.T) {
	t.Parallel()
	testListingsWithHugeErrors(t, newEnv(t))
}

func TestPostgresListingsWithHugeErrors(t *testing.T) {
	t.Parallel()
	testListingsWithHugeErrors(t, newPostgresEnv(t))
}

func testListingsWithHugeErrors(t *testing.T, e *env) {
	const jobs, mib = 50, 1 << 20
	ctx := t.Context()
	now := time.Now()
	ins := &twicestore.JobInsertManyParams{}
	for i := range jobs {
		ins.Jobs = append(ins.Jobs, &twicestore.JobInsertParams{
			Kind: "web.boom.v1", Queue: "default", Args: []byte(`{"N":` + strconv.Itoa(i) + `}`),
			MessageID: uuid.NewString(), Key: uuid.NewString(), MaxAttempts: 1, RunAt: now, CreatedAt: now,
		})
	}
	if _, err := e.store.JobInsertMany(ctx, ins); err != nil {
		t.Fatal(err)
	}
	fetched, err := e.store.JobFetch(ctx, &twicestore.JobFetchParams{
		Queue: "default", Kinds: []string{"web.boom.v1"}, Limit: jobs, Node: "test", Now: now, LeaseUntil: now.Add(time.Hour),
	})
	if err != nil || len(fetched.Jobs) != jobs {
		t.Fatalf("fetch: %v, %d jobs", err, len(fetched.Jobs))
	}
	// Half fail with a first line and a megabyte below it, half with one
	// line of a megabyte.
	errText := func(id int64) string {
		if id%2 == 0 {
			return "boom " + strconv.FormatInt(id, 10) + ": the provider said no\n" + strings.Repeat("x", mib)
		}
		return strings.Repeat("é", mib/2)
	}
	for _, j := range fetched.Jobs {
		// One outcome per call: a batch of 50 MiB is more than a
		// PostgreSQL message may carry.
		_, err := e.store.JobFinish(ctx, &twicestore.JobFinishParams{Outcomes: []*twicestore.JobOutcome{{
			ID: j.ID, Epoch: j.Epoch, State: twicetype.JobStateDead, FinishedAt: now,
			Error: &twicetype.AttemptError{Attempt: 1, At: now, Error: errText(j.ID)},
		}}})
		if err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(e.handler(twiceweb.Options{}))
	defer srv.Close()
	b := newBrowser(t, srv.URL)
	for _, path := range []string{"/dead", "/jobs"} {
		status, body := b.get(path)
		t.Logf("GET %s with %d jobs whose errors are 1 MiB each: %d bytes", path, jobs, len(body))
		if status != http.StatusOK || len(body) >= 1_000_000 {
			t.Errorf("GET %s: %d, %d bytes; want 200 under 1 MB", path, status, len(body))
		}
		if got := strings.Count(body, "the provider said no …"); got != jobs/2 {
			t.Errorf("GET %s shows %d first lines of the multi-line errors, want %d", path, got, jobs/2)
		}
		if !strings.Contains(body, strings.Repeat("é", 160)+" …") || strings.Contains(body, strings.Repeat("é", 161)) {
			t.Errorf("GET %s does not cut a one-line error to 160 characters", path)
		}
	}
	id := fetched.Jobs[0].ID
	row, err := e.store.JobGet(ctx, &twicestore.JobGetParams{ID: id})
	if err != nil {
		t.Fatal(err)
	}
	stored := row.Errors[len(row.Errors)-1].Error
	_, body := b.get("/jobs/" + strconv.FormatInt(id, 10))
	if !strings.Contains(body, template.HTMLEscapeString(stored)) {
		t.Errorf("the job page does not show the stored error text (%d bytes)", len(stored))
	}
}
