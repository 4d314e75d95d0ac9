package twiceweb_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicetype"
	"github.com/twicejobs/twice/twiceweb"
)

const (
	apiToken   = "0123456789abcdef0123456789abcdef-ci"
	apiToken2  = "fedcba9876543210fedcba9876543210-ops"
	apiMount   = "/admin/jobs"
	apiTokName = "ci-bot"
)

// apiEnv is a dashboard with API tokens, mounted under apiMount on a
// test server.
type apiEnv struct {
	*env
	srv *httptest.Server
}

func newAPIEnv(t *testing.T, opts twiceweb.Options) *apiEnv {
	t.Helper()
	return newAPIEnvOn(t, newEnv(t), opts)
}

func newAPIEnvOn(t *testing.T, e *env, opts twiceweb.Options) *apiEnv {
	t.Helper()
	if opts.APITokens == nil {
		opts.APITokens = []twiceweb.APIToken{{Name: apiTokName, Token: apiToken}, {Name: "ops", Token: apiToken2}}
	}
	h := e.handler(opts)
	mux := http.NewServeMux()
	mux.Handle(apiMount+"/", http.StripPrefix(apiMount, h))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &apiEnv{env: e, srv: srv}
}

// apiResp is an API response with its body decoded.
type apiResp struct {
	status int
	header http.Header
	raw    string
	body   map[string]any
}

// call sends method path (below /api/v1) with body and headers, given
// as name, value pairs (an empty value removes the header).
func (a *apiEnv) call(method, path, token, body string, headers ...string) apiResp {
	a.t.Helper()
	req, err := http.NewRequest(method, a.srv.URL+apiMount+"/api/v1"+path, strings.NewReader(body))
	if err != nil {
		a.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i+1] == "" {
			req.Header.Del(headers[i])
			continue
		}
		req.Header.Set(headers[i], headers[i+1])
	}
	return a.do(req)
}

func (a *apiEnv) do(req *http.Request) apiResp {
	a.t.Helper()
	resp, err := a.srv.Client().Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }() // read to the end below
	raw, _ := io.ReadAll(resp.Body)
	out := apiResp{status: resp.StatusCode, header: resp.Header, raw: string(raw)}
	if len(raw) > 0 && raw[0] == '{' {
		if err := json.Unmarshal(raw, &out.body); err != nil {
			a.t.Fatalf("%s %s: body is not JSON: %v\n%s", req.Method, req.URL.Path, err, raw)
		}
	}
	return out
}

// want fails unless r has status; a 4xx must be problem+json.
func (r apiResp) want(t *testing.T, status int) apiResp {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d: %s", r.status, status, r.raw)
	}
	if status >= 400 {
		if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
			t.Fatalf("a %d is %q, want application/problem+json: %s", status, ct, r.raw)
		}
		for _, k := range []string{"type", "title", "status", "detail"} {
			if r.body[k] == nil {
				t.Fatalf("the problem lacks %q: %s", k, r.raw)
			}
		}
	}
	return r
}

func (r apiResp) problemType() string {
	s, _ := r.body["type"].(string)
	return s[strings.LastIndex(s, "#problem-")+len("#problem-"):]
}

func (r apiResp) id(t *testing.T) int64 {
	t.Helper()
	f, ok := r.body["id"].(float64)
	if !ok {
		t.Fatalf("no id in %s", r.raw)
	}
	return int64(f)
}

// jobCount is how many jobs the store holds.
func (a *apiEnv) jobCount() int {
	a.t.Helper()
	c, err := twice.NewClient(a.store, twice.Config{Registry: a.reg})
	if err != nil {
		a.t.Fatal(err)
	}
	res, err := c.JobList(a.t.Context(), &twice.JobListParams{Limit: twice.JobListLimitMax})
	if err != nil {
		a.t.Fatal(err)
	}
	return len(res.Jobs)
}

func TestAPIEnqueueAndGet(t *testing.T) {
	t.Parallel()
	a := newAPIEnv(t, twiceweb.Options{})
	runAt := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	r := a.call("POST", "/jobs", apiToken, fmt.Sprintf(
		`{"kind":"web.boom.v1","args":{"N":7,"Password":"hunter2"},"queue":"default","run_at":%q,"unique_key":"boom-7","metadata":{"traceparent":"00-abc-def-01"}}`,
		runAt.Format(time.RFC3339))).want(t, http.StatusCreated)
	id := r.id(t)
	if r.body["state"] != "available" || r.body["kind"] != "web.boom.v1" || r.body["queue"] != "default" || r.body["duplicate"] != false {
		t.Fatalf("enqueue answered %s", r.raw)
	}
	if got := r.header.Get("Location"); got != fmt.Sprintf("%s/api/v1/jobs/%d", apiMount, id) {
		t.Fatalf("Location %q", got)
	}
	if r.body["run_at"] != runAt.Format(time.RFC3339) {
		t.Fatalf("run_at %v, want %s", r.body["run_at"], runAt.Format(time.RFC3339))
	}

	// The same unique key: the same job, as a result, not an error.
	dup := a.call("POST", "/jobs", apiToken, `{"kind":"web.boom.v1","args":{"N":8},"unique_key":"boom-7"}`).want(t, http.StatusOK)
	if dup.id(t) != id || dup.body["duplicate"] != true {
		t.Fatalf("duplicate answered %s", dup.raw)
	}

	// Read back: sensitive args redacted, metadata kept; a browser-less
	// read without a token works on a loopback dashboard with no auth.
	got := a.call("GET", fmt.Sprintf("/jobs/%d", id), "", "").want(t, http.StatusOK)
	args, _ := got.body["args"].(map[string]any)
	if args["Password"] != "[redacted]" || args["N"] != float64(7) {
		t.Fatalf("args %v: want Password redacted and N 7", got.body["args"])
	}
	if md, _ := got.body["metadata"].(map[string]any); md["traceparent"] != "00-abc-def-01" {
		t.Fatalf("metadata %v", got.body["metadata"])
	}
	if got.body["unique_key"] != "boom-7" {
		t.Fatalf("unique_key %v", got.body["unique_key"])
	}
	if n := a.jobCount(); n != 1 {
		t.Fatalf("%d jobs, want 1", n)
	}
}

// TestAPIEnqueueRefusals: every bad request is a 4xx problem and stores
// nothing.
func TestAPIEnqueueRefusals(t *testing.T) {
	t.Parallel()
	a := newAPIEnv(t, twiceweb.Options{})
	big := `{"kind":"web.ok.v1","args":{"N":1,"pad":"` + strings.Repeat("x", 70<<10) + `"}}`
	manyMeta := make(map[string]string)
	for i := range 40 {
		manyMeta[fmt.Sprint("k", i)] = "v"
	}
	mm, _ := json.Marshal(map[string]any{"kind": "web.ok.v1", "args": map[string]int{"N": 1}, "metadata": manyMeta})
	for _, tc := range []struct {
		name, token, body string
		headers           []string
		status            int
		problem           string
	}{
		{"no token", "", `{"kind":"web.ok.v1","args":{"N":1}}`, nil, 401, "token-required"},
		{"wrong token", "not-a-token-of-this-server-at-all-000", `{"kind":"web.ok.v1","args":{"N":1}}`, nil, 401, "token-invalid"},
		{"malformed JSON", apiToken, `{"kind":"web.ok.v1",`, nil, 400, "invalid-request"},
		{"not an object", apiToken, `[1,2]`, nil, 400, "invalid-request"},
		{"two values", apiToken, `{"kind":"web.ok.v1"} {"kind":"web.ok.v1"}`, nil, 400, "invalid-request"},
		{"unknown field", apiToken, `{"kind":"web.ok.v1","args":{"N":1},"prority":3}`, nil, 400, "invalid-request"},
		{"wrong type", apiToken, `{"kind":"web.ok.v1","args":{"N":1},"priority":"high"}`, nil, 400, "invalid-request"},
		{"empty body", apiToken, ``, nil, 400, "invalid-request"},
		{"no kind", apiToken, `{"args":{"N":1}}`, nil, 400, "invalid-request"},
		{"bad run_at", apiToken, `{"kind":"web.ok.v1","args":{"N":1},"run_at":"tomorrow"}`, nil, 400, "invalid-request"},
		{"negative max_attempts", apiToken, `{"kind":"web.ok.v1","args":{"N":1},"max_attempts":-1}`, nil, 400, "invalid-request"},
		{"form body", apiToken, `{"kind":"web.ok.v1"}`, []string{"Content-Type", "application/x-www-form-urlencoded"}, 415, "unsupported-media-type"},
		{"invalid UTF-8", apiToken, "{\"kind\":\"web.ok.v1\",\"args\":{\"N\":1},\"queue\":\"q\xff\"}", nil, 400, "invalid-request"},
		{"oversized", apiToken, big, nil, 413, "request-body-too-large"},
		{"oversized without key", apiToken, big, []string{"Idempotency-Key", ""}, 413, "body-too-large"},
		{"too much metadata", apiToken, string(mm), nil, 400, "invalid-request"},
		{"NUL in metadata", apiToken, `{"kind":"web.ok.v1","args":{"N":1},"metadata":{"a":"b\u0000"}}`, nil, 400, "invalid-request"},
		{"NUL in args", apiToken, `{"kind":"web.ok.v1","args":{"N":1,"x":"a\u0000"}}`, nil, 422, "invalid-args"},
		{"NUL in kind", apiToken, `{"kind":"web.ok\u0000.v1","args":{"N":1}}`, nil, 422, "invalid-args"},
		{"NUL in unique key", apiToken, `{"kind":"web.ok.v1","args":{"N":1},"unique_key":"a\u0000"}`, nil, 422, "invalid-args"},
		{"unknown kind", apiToken, `{"kind":"web.nope.v1","args":{"N":1}}`, nil, 422, "unknown-kind"},
		{"args of another type", apiToken, `{"kind":"web.ok.v1","args":{"N":"one"}}`, nil, 422, "invalid-args"},
		{"args not an object", apiToken, `{"kind":"web.ok.v1","args":[1]}`, nil, 422, "invalid-args"},
		{"bad queue", apiToken, `{"kind":"web.ok.v1","args":{"N":1},"queue":"has space"}`, nil, 422, "invalid-args"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			headers := append([]string{"Idempotency-Key", "k-" + strings.ReplaceAll(tc.name, " ", "-")}, tc.headers...)
			r := a.call("POST", "/jobs", tc.token, tc.body, headers...).want(t, tc.status)
			if tc.problem != "" && r.problemType() != tc.problem {
				t.Fatalf("problem %q, want %q: %s", r.problemType(), tc.problem, r.raw)
			}
		})
	}
	if n := a.jobCount(); n != 0 {
		t.Fatalf("%d jobs stored by refused requests, want 0", n)
	}
}

// TestAPIIdempotencyKey: concurrent POSTs with one key make one job; a
// retry replays it; the key with another body is 422.
func TestAPIIdempotencyKey(t *testing.T) {
	t.Parallel()
	a := newAPIEnv(t, twiceweb.Options{})
	const body = `{"kind":"web.ok.v1","args":{"N":1}}`
	var wg sync.WaitGroup
	resps := make([]apiResp, 20)
	start := make(chan struct{})
	for i := range resps {
		wg.Go(func() {
			<-start
			resps[i] = a.call("POST", "/jobs", apiToken, body, "Idempotency-Key", "order-42")
		})
	}
	close(start)
	wg.Wait()
	ids := map[int64]bool{}
	for _, r := range resps {
		switch r.status {
		case http.StatusCreated:
			ids[r.id(t)] = true
		case http.StatusConflict: // the first request still ran: retry later
			if r.want(t, http.StatusConflict).problemType() != "request-in-progress" {
				t.Fatalf("409 %s", r.raw)
			}
		default:
			t.Fatalf("status %d: %s", r.status, r.raw)
		}
	}
	if n := a.jobCount(); n != 1 || len(ids) != 1 {
		t.Fatalf("20 POSTs with one key: %d jobs, %d distinct ids answered; want 1 and 1", n, len(ids))
	}
	retry := a.call("POST", "/jobs", apiToken, body, "Idempotency-Key", "order-42").want(t, http.StatusCreated)
	if !ids[retry.id(t)] || retry.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry answered %s (replayed %q), want the same job replayed", retry.raw, retry.header.Get("Idempotent-Replayed"))
	}
	other := a.call("POST", "/jobs", apiToken, `{"kind":"web.ok.v1","args":{"N":2}}`, "Idempotency-Key", "order-42").
		want(t, http.StatusUnprocessableEntity)
	if other.problemType() != "idempotency-key-reused" {
		t.Fatalf("other body: %s", other.raw)
	}
	// Keys are per token: another machine's key is its own.
	mine := a.call("POST", "/jobs", apiToken2, body, "Idempotency-Key", "order-42").want(t, http.StatusCreated)
	if ids[mine.id(t)] {
		t.Fatal("another token's request replayed the first token's job")
	}
	if n := a.jobCount(); n != 2 {
		t.Fatalf("%d jobs, want 2", n)
	}
}

func TestAPIListJobs(t *testing.T) {
	t.Parallel()
	a := newAPIEnv(t, twiceweb.Options{})
	var ids []int64
	for i := range 3 {
		ids = append(ids, a.enqueue(okArgs{N: i}))
	}
	boom := a.enqueue(boomArgs{N: 9, Password: "pw"})
	all := a.call("GET", "/jobs", apiToken, "").want(t, http.StatusOK)
	if jobs, _ := all.body["jobs"].([]any); len(jobs) != 4 {
		t.Fatalf("%d jobs listed, want 4: %s", len(jobs), all.raw)
	}
	// Pages of two, newest first, by "after".
	p1 := a.call("GET", "/jobs?kind=web.ok.v1&limit=2", apiToken, "").want(t, http.StatusOK)
	jobs, _ := p1.body["jobs"].([]any)
	if len(jobs) != 2 || jobs[0].(map[string]any)["id"] != float64(ids[2]) {
		t.Fatalf("first page %s", p1.raw)
	}
	p2 := a.call("GET", fmt.Sprintf("/jobs?kind=web.ok.v1&limit=2&after=%v", p1.body["next"]), apiToken, "").want(t, http.StatusOK)
	jobs, _ = p2.body["jobs"].([]any)
	if len(jobs) != 1 || jobs[0].(map[string]any)["id"] != float64(ids[0]) || p2.body["next"] != nil {
		t.Fatalf("second page %s", p2.raw)
	}
	b := a.call("GET", "/jobs?state=available&kind=web.boom.v1&queue=default", apiToken, "").want(t, http.StatusOK)
	jobs, _ = b.body["jobs"].([]any)
	if len(jobs) != 1 || jobs[0].(map[string]any)["id"] != float64(boom) ||
		jobs[0].(map[string]any)["args"].(map[string]any)["Password"] != "[redacted]" {
		t.Fatalf("filtered list %s", b.raw)
	}
	for _, tc := range []struct {
		name, query string
		status      int
	}{
		{"unknown parameter", "?sate=dead", 400},
		{"repeated parameter", "?kind=a&kind=b", 400},
		{"bad limit", "?limit=ten", 400},
		{"negative after", "?after=-1", 400},
		{"unknown state", "?state=sleeping", 422},
		{"NUL in kind", "?kind=a%00b", 400},
		{"bad UTF-8", "?kind=a%ffb", 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a.call("GET", "/jobs"+tc.query, apiToken, "").want(t, tc.status)
		})
	}
	for _, tc := range []struct{ path, problem string }{
		{"/jobs/999999", "job-not-found"},
		{"/jobs/abc", "job-not-found"},
		{"/jobs/-3", "job-not-found"},
	} {
		if r := a.call("GET", tc.path, apiToken, "").want(t, 404); r.problemType() != tc.problem {
			t.Fatalf("%s: %s", tc.path, r.raw)
		}
	}
}

// TestAPIArgsHidden: a kind in no catalog has its args hidden, as on the
// dashboard.
func TestAPIArgsHidden(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.enqueue(boomArgs{N: 1, Password: "pw"})
	// A dashboard that registers nothing, over a store whose catalog no
	// worker filled: it cannot tell Password is sensitive.
	h := e.handlerWith(nil, twiceweb.Options{APITokens: []twiceweb.APIToken{{Name: "x", Token: apiToken}}})
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", fmt.Sprintf("/api/v1/jobs/%d", id), nil)
	req.Header.Set("Authorization", "Bearer "+apiToken)
	h.ServeHTTP(rec, req)
	if rec.Code != 200 || strings.Contains(rec.Body.String(), "pw") || !strings.Contains(rec.Body.String(), `"args_hidden":true`) {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
}

func TestAPICancelRetry(t *testing.T) {
	t.Parallel()
	a := newAPIEnv(t, twiceweb.Options{})
	c, err := twice.NewClient(a.store, twice.Config{Registry: a.reg})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Enqueue(t.Context(), okArgs{N: 1}, &twice.EnqueueOpts{Delay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	id := res.Job.ID
	path := fmt.Sprintf("/jobs/%d", id)

	r := a.call("POST", path+"/cancel", apiToken, `{"reason":"customer asked"}`).want(t, 200)
	if r.body["state"] != "cancelled" || r.body["changed"] != true {
		t.Fatalf("cancel answered %s", r.raw)
	}
	got := a.call("GET", path, apiToken, "").want(t, 200)
	if cr, _ := got.body["cancel"].(map[string]any); cr["by"] != apiTokName || cr["reason"] != "customer asked" {
		t.Fatalf("cancel recorded as %v, want by %q", got.body["cancel"], apiTokName)
	}
	if r := a.call("POST", path+"/cancel", apiToken, "").want(t, 409); r.problemType() != "job-state-conflict" {
		t.Fatalf("second cancel %s", r.raw)
	}
	r = a.call("POST", path+"/retry", apiToken, "").want(t, 200)
	if r.body["state"] != "available" || r.body["changed"] != true {
		t.Fatalf("retry answered %s", r.raw)
	}
	a.call("POST", path+"/retry", apiToken, "").want(t, 409)
	a.call("POST", "/jobs/424242/cancel", apiToken, "").want(t, 404)
	a.call("POST", "/jobs/424242/retry", apiToken, "").want(t, 404)
	a.call("POST", path+"/cancel", apiToken, `{"reason":"x","by":"me"}`).want(t, 400)
	a.call("POST", path+"/cancel", apiToken, `{"reason":"`+strings.Repeat("r", 2000)+`"}`).want(t, 422)
	a.call("POST", path+"/cancel", "", "").want(t, 401)
	if st := a.state(id); st != twicetype.JobStateAvailable {
		t.Fatalf("job is %s after refused cancels, want available", st)
	}
}

func TestAPIQueues(t *testing.T) {
	t.Parallel()
	a := newAPIEnv(t, twiceweb.Options{})
	a.enqueue(okArgs{N: 1})
	until := time.Now().Add(time.Hour).UTC().Truncate(time.Second).Format(time.RFC3339)
	r := a.call("POST", "/queues/default/pause", apiToken, `{"until":"`+until+`","reason":"deploy"}`).want(t, 200)
	if r.body["paused"] != true || r.body["until"] != until {
		t.Fatalf("pause answered %s", r.raw)
	}
	if r := a.call("POST", "/queues/default/resume", apiToken, "").want(t, 200); r.body["resumed"] != true {
		t.Fatalf("resume answered %s", r.raw)
	}
	if r := a.call("POST", "/queues/default/resume", apiToken, "").want(t, 200); r.body["resumed"] != false {
		t.Fatalf("second resume answered %s", r.raw)
	}
	a.call("POST", "/queues/nosuchqueue/pause", apiToken, "").want(t, 404)
	a.call("POST", "/queues/nosuchqueue/resume", apiToken, "").want(t, 404)
	a.call("POST", "/queues/default/pause", apiToken, `{"until":"2001-01-01T00:00:00Z"}`).want(t, 422)
	a.call("POST", "/queues/default/pause", apiToken, `{"until":"soon"}`).want(t, 400)
	a.call("GET", "/queues/default/pause", apiToken, "").want(t, 405)
	c, err := twice.NewClient(a.store, twice.Config{Registry: a.reg})
	if err != nil {
		t.Fatal(err)
	}
	qs, err := c.QueueList(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if q.Paused {
			t.Fatalf("queue %s paused after refused pauses", q.Name)
		}
	}
}

func TestAPISwitches(t *testing.T) {
	t.Parallel()
	a := newAPIEnv(t, twiceweb.Options{})
	r := a.call("PUT", "/switches/web.ok.v1", apiToken, `{"enabled":false,"reason":"provider down"}`).want(t, 200)
	if r.body["kind"] != "web.ok.v1" || r.body["enabled"] != false {
		t.Fatalf("set answered %s", r.raw)
	}
	if r := a.call("PUT", "/switches/web.nope.v1", apiToken, `{"enabled":false}`).want(t, 404); !strings.Contains(r.raw, "force") {
		t.Fatalf("unknown kind: %s", r.raw)
	}
	a.call("PUT", "/switches/web.nope.v1", apiToken, `{"enabled":false,"force":true}`).want(t, 200)
	a.call("PUT", "/switches/web.ok.v1", apiToken, `{"reason":"no state"}`).want(t, 400)
	a.call("PUT", "/switches/web.ok.v1", apiToken, `{"enabled":"off"}`).want(t, 400)
	a.call("PUT", "/switches/web.ok.v1", apiToken, `{"enabled":true,"expires_at":"2001-01-01T00:00:00Z"}`).want(t, 422)
	c, err := twice.NewClient(a.store, twice.Config{Registry: a.reg})
	if err != nil {
		t.Fatal(err)
	}
	stored, err := c.ToggleList(t.Context())
	if err != nil || len(stored) != 2 || stored[1].Kind != "web.ok.v1" || stored[1].Enabled || stored[1].By != apiTokName {
		t.Fatalf("stored switches %+v, %v", stored, err)
	}
	r = a.call("DELETE", "/switches/web.ok.v1", apiToken, `{"reason":"provider back"}`).want(t, 200)
	if r.body["removed"] != true {
		t.Fatalf("unset answered %s", r.raw)
	}
	a.call("DELETE", "/switches/web.ok.v1", apiToken, "").want(t, 404)
	a.call("DELETE", "/switches/web.nope.v1", "", "").want(t, 401)
}

func TestAPIKinds(t *testing.T) {
	t.Parallel()
	a := newAPIEnv(t, twiceweb.Options{})
	r := a.call("GET", "/kinds", "", "").want(t, 200)
	kinds, _ := r.body["kinds"].([]any)
	found := false
	for _, k := range kinds {
		k := k.(map[string]any)
		if k["kind"] == "web.boom.v1" {
			found = true
			if fs, _ := k["sensitive_fields"].([]any); len(fs) != 1 || fs[0] != "Password" {
				t.Fatalf("web.boom.v1 sensitive fields %v", k["sensitive_fields"])
			}
		}
		if k["kind"] == "web.money.v1" && k["fail_closed"] != true {
			t.Fatalf("web.money.v1 %v", k)
		}
	}
	if !found {
		t.Fatalf("web.boom.v1 not listed: %s", r.raw)
	}
}

// TestAPIAuth: tokens write; the dashboard's browser credentials only
// read; the Host rule holds for requests without a token.
func TestAPIAuth(t *testing.T) {
	t.Parallel()
	const enq = `{"kind":"web.ok.v1","args":{"N":1}}`
	t.Run("basic auth reads, never writes", func(t *testing.T) {
		t.Parallel()
		a := newAPIEnv(t, twiceweb.Options{BasicAuth: &twiceweb.BasicAuth{User: "op", Password: "pw"}})
		basic := func(method, path, body string) apiResp {
			req, _ := http.NewRequest(method, a.srv.URL+apiMount+"/api/v1"+path, strings.NewReader(body))
			req.SetBasicAuth("op", "pw")
			req.Header.Set("Content-Type", "application/json")
			return a.do(req)
		}
		basic("GET", "/kinds", "").want(t, 200)
		if r := basic("POST", "/jobs", enq).want(t, 401); r.problemType() != "token-required" {
			t.Fatalf("%s", r.raw)
		}
		a.call("GET", "/kinds", "", "").want(t, 401)
		a.call("GET", "/kinds", "wrong-token-wrong-token-wrong-token", "").want(t, 401)
		a.call("POST", "/jobs", apiToken, enq).want(t, 201)
		if n := a.jobCount(); n != 1 {
			t.Fatalf("%d jobs", n)
		}
	})
	t.Run("a session cookie reads, never writes", func(t *testing.T) {
		t.Parallel()
		a := newAPIEnv(t, twiceweb.Options{Authenticate: func(r *http.Request) (string, error) {
			if c, err := r.Cookie("session"); err == nil && c.Value == "ada" {
				return "ada", nil
			}
			return "", errors.New("not signed in")
		}})
		withCookie := func(method, path, body string) apiResp {
			req, _ := http.NewRequest(method, a.srv.URL+apiMount+"/api/v1"+path, strings.NewReader(body))
			req.AddCookie(&http.Cookie{Name: "session", Value: "ada"})
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Origin", a.srv.URL) // even same-origin
			return a.do(req)
		}
		withCookie("GET", "/jobs", "").want(t, 200)
		withCookie("POST", "/jobs", enq).want(t, 401)
		withCookie("PUT", "/switches/web.ok.v1", `{"enabled":false}`).want(t, 401)
		if n := a.jobCount(); n != 0 {
			t.Fatalf("%d jobs", n)
		}
	})
	t.Run("dashboard bearer token writes", func(t *testing.T) {
		t.Parallel()
		a := newAPIEnv(t, twiceweb.Options{BearerToken: "dash-token-dash-token-dash-token!!"})
		a.call("POST", "/jobs", "dash-token-dash-token-dash-token!!", enq).want(t, 201)
		a.call("POST", "/jobs", apiToken, enq).want(t, 201)
	})
	t.Run("API tokens do not open the dashboard", func(t *testing.T) {
		t.Parallel()
		a := newAPIEnv(t, twiceweb.Options{BasicAuth: &twiceweb.BasicAuth{User: "op", Password: "pw"}})
		req, _ := http.NewRequest("GET", a.srv.URL+apiMount+"/jobs", nil)
		req.Header.Set("Authorization", "Bearer "+apiToken)
		if r := a.do(req); r.status != 401 {
			t.Fatalf("dashboard page with an API token: %d", r.status)
		}
	})
	t.Run("read-only", func(t *testing.T) {
		t.Parallel()
		a := newAPIEnv(t, twiceweb.Options{ReadOnly: true})
		a.call("POST", "/jobs", apiToken, enq).want(t, 403)
		a.call("GET", "/jobs", apiToken, "").want(t, 200)
	})
	t.Run("host rule without a token", func(t *testing.T) {
		t.Parallel()
		a := newAPIEnv(t, twiceweb.Options{})
		req, _ := http.NewRequest("GET", a.srv.URL+apiMount+"/api/v1/kinds", nil)
		req.Host = "rebound.example"
		a.do(req).want(t, 403)
		req, _ = http.NewRequest("POST", a.srv.URL+apiMount+"/api/v1/jobs", strings.NewReader(enq))
		req.Host = "api.example"
		req.Header.Set("Authorization", "Bearer "+apiToken)
		a.do(req).want(t, 201)
	})
	t.Run("unknown routes and methods", func(t *testing.T) {
		t.Parallel()
		a := newAPIEnv(t, twiceweb.Options{})
		a.call("GET", "/nope", apiToken, "").want(t, 404)
		r := a.call("DELETE", "/jobs", apiToken, "").want(t, 405)
		if r.header.Get("Allow") != "GET, POST" {
			t.Fatalf("Allow %q", r.header.Get("Allow"))
		}
	})
}

func TestAPITokenOptions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c, err := twice.NewClient(e.store, twice.Config{Registry: e.reg})
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("a", 32)
	for _, tc := range []struct {
		name   string
		tokens []twiceweb.APIToken
	}{
		{"no name", []twiceweb.APIToken{{Token: long}}},
		{"short token", []twiceweb.APIToken{{Name: "a", Token: "short"}}},
		{"space in token", []twiceweb.APIToken{{Name: "a", Token: long + " x"}}},
		{"same name", []twiceweb.APIToken{{Name: "a", Token: long}, {Name: "a", Token: long + "b"}}},
		{"same token", []twiceweb.APIToken{{Name: "a", Token: long}, {Name: "b", Token: long}}},
		{"NUL in name", []twiceweb.APIToken{{Name: "a\x00", Token: long}}},
		{"the dashboard token's name", []twiceweb.APIToken{{Name: "bearer-token", Token: long}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := twiceweb.New(c, twiceweb.Options{APITokens: tc.tokens}); err == nil {
				t.Fatal("New accepted it")
			}
		})
	}
}

// TestAPIBrowserFormsStillNeedCSRF: the API's token path leaves the
// dashboard's form actions as they were.
func TestAPIBrowserFormsStillNeedCSRF(t *testing.T) {
	t.Parallel()
	a := newAPIEnv(t, twiceweb.Options{})
	form := strings.NewReader("queue=default&reason=x")
	req, _ := http.NewRequest("POST", a.srv.URL+apiMount+"/queues/pause", form)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "Bearer "+apiToken)
	if r := a.do(req); r.status != http.StatusForbidden {
		t.Fatalf("a form action with an API token and no CSRF token: %d, want 403", r.status)
	}
}

func TestAPIPostgres(t *testing.T) {
	t.Parallel()
	a := newAPIEnvOn(t, newPostgresEnv(t), twiceweb.Options{})
	const body = `{"kind":"web.ok.v1","args":{"N":1}}`
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() { a.call("POST", "/jobs", apiToken, body, "Idempotency-Key", "pg-1") })
	}
	wg.Wait()
	r := a.call("POST", "/jobs", apiToken, body, "Idempotency-Key", "pg-1").want(t, http.StatusCreated)
	if n := a.jobCount(); n != 1 {
		t.Fatalf("%d jobs, want 1", n)
	}
	a.call("POST", "/jobs", apiToken, `{"kind":"web.ok.v1","args":{"N":1,"x":"\u0000"}}`).want(t, 422)
	a.call("POST", "/jobs", apiToken, `{"kind":"web.ok.v1","args":{"N":1},"metadata":{"k":"\u0000"}}`).want(t, 400)
	a.call("POST", fmt.Sprintf("/jobs/%d/cancel", r.id(t)), apiToken, `{"reason":"a\u0000"}`).want(t, 422)
	a.call("GET", fmt.Sprintf("/jobs/%d", r.id(t)), apiToken, "").want(t, 200)
	if n := a.jobCount(); n != 1 {
		t.Fatalf("%d jobs, want 1", n)
	}
}
