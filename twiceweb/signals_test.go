package twiceweb_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/testkit/waitfor"
	"github.com/twicejobs/twice/twicetype"
	"github.com/twicejobs/twice/twiceweb"
)

type refundArgs struct{ N int }

func (refundArgs) Kind() string { return "web.refund.v1" }

type callbackArgs struct{ N int }

func (callbackArgs) Kind() string { return "web.callback.v1" }

var waitKey = []byte("0123456789abcdef0123456789abcdef")

// waitEnv is a worker running kinds that wait, and the dashboard with
// API tokens, both with the same wait-token key.
type waitEnv struct {
	*apiEnv
	tokens chan string // each callback job's wait token, per run
}

func newWaitEnv(t *testing.T) *waitEnv {
	t.Helper()
	e := newEnv(t)
	w := &waitEnv{tokens: make(chan string, 10)}
	twice.MustRegister(e.reg, twice.HandlerFunc[refundArgs](func(ctx context.Context, _ *twice.Job[refundArgs]) error {
		d, err := twice.AwaitSignal[twice.Decision](ctx, "approve", twice.NoTimeout)
		if err != nil {
			return err
		}
		return twice.RecordOutput(ctx, d)
	}), &twice.KindOpts{Strategy: twice.None})
	twice.MustRegister(e.reg, twice.HandlerFunc[callbackArgs](func(ctx context.Context, _ *twice.Job[callbackArgs]) error {
		tok, err := twice.WaitToken(ctx, "paid", time.Hour)
		if err != nil {
			return err
		}
		w.tokens <- tok
		v, err := twice.AwaitSignal[map[string]string](ctx, "paid", twice.NoTimeout)
		if err != nil {
			return err
		}
		return twice.RecordOutput(ctx, v)
	}), &twice.KindOpts{Strategy: twice.None})
	worker, err := twice.NewClient(e.store, twice.Config{Registry: e.reg, PollInterval: 20 * time.Millisecond,
		WaitTokenKey: waitKey, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := worker.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = worker.Stop(ctx)
	})
	e.client = worker
	dash, err := twice.NewClient(e.store, twice.Config{Registry: e.reg, WaitTokenKey: waitKey})
	if err != nil {
		t.Fatal(err)
	}
	h, err := twiceweb.New(dash, twiceweb.Options{Logger: slog.New(slog.NewTextHandler(e.logs, nil)),
		APITokens: []twiceweb.APIToken{{Name: apiTokName, Token: apiToken}}})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(apiMount+"/", http.StripPrefix(apiMount, h))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	w.apiEnv = &apiEnv{env: e, srv: srv}
	return w
}

func (w *waitEnv) waiting(id int64) {
	w.t.Helper()
	w.await(fmt.Sprintf("job %d waiting", id), func() bool { return w.state(id) == twicetype.JobStateWaiting })
}

func (w *waitEnv) output(id int64) string {
	w.t.Helper()
	out, err := w.client.Wait(w.t.Context(), id)
	if err != nil {
		w.t.Fatal(err)
	}
	return string(out.Output)
}

// TestDashboardApprovesAWaitingJob: a waiting job's page says what it
// waits for and offers approve and reject; the confirmed approval sends
// a twice.Decision with who and why, and the job completes with it; a
// second decision is refused as a conflict.
func TestDashboardApprovesAWaitingJob(t *testing.T) {
	t.Parallel()
	w := newWaitEnv(t)
	id := w.enqueue(refundArgs{N: 1})
	w.waiting(id)
	ids := strconv.FormatInt(id, 10)
	page := apiMount + "/jobs/" + ids
	b := newBrowser(t, w.srv.URL)
	status, body := b.get(page)
	if status != http.StatusOK || !strings.Contains(body, `id="waiting-for"`) || !strings.Contains(body, "with no timeout") ||
		!strings.Contains(body, `id="approve"`) || !strings.Contains(body, `id="reject"`) {
		t.Fatalf("the waiting job's page: %d, want what it waits for and the approve and reject buttons:\n%s", status, body)
	}
	if status, body := b.get(apiMount + "/jobs?state=waiting"); status != http.StatusOK || !strings.Contains(body, "for approve") || !strings.Contains(body, "no timeout") {
		t.Fatalf("the waiting jobs' list: %d, want the job waiting for approve with no timeout:\n%s", status, body)
	}
	form := url.Values{"id": {ids}, "name": {"approve"}, "decision": {"approve"}}
	if status, body := b.post(page, apiMount+"/jobs/signal", form); status != http.StatusBadRequest || !strings.Contains(body, "a reason is required") {
		t.Fatalf("approve without a reason: %d, want 400:\n%s", status, body)
	}
	form.Set("reason", "checked the invoice")
	status, body = b.confirm(page, apiMount+"/jobs/signal", form, "Approve job "+ids+"?")
	if status != http.StatusOK {
		t.Fatalf("confirmed approval: %d:\n%s", status, body)
	}
	out := w.output(id)
	if !strings.Contains(out, `"approved":true`) || !strings.Contains(out, `"by":"anonymous@127.0.0.1"`) || !strings.Contains(out, "checked the invoice") {
		t.Fatalf("the job's output %s, want the approval with who and why", out)
	}
	form.Set("decision", "reject")
	form.Set("confirm", "yes")
	if status, body := b.post(page, apiMount+"/jobs/signal", form); status != http.StatusConflict {
		t.Fatalf("a decision for a finished job: %d, want 409:\n%s", status, body)
	}
	form.Set("decision", "maybe")
	if status, _ := b.post(page, apiMount+"/jobs/signal", form); status != http.StatusBadRequest {
		t.Fatalf("an unknown decision: %d, want 400", status)
	}
}

// TestAPISignals: the API token's route and the wait-token route signal
// a job once, under Idempotency-Key; bad input is refused with
// problem+json, and nothing is signalled.
func TestAPISignals(t *testing.T) {
	t.Parallel()
	w := newWaitEnv(t)
	id := w.enqueue(callbackArgs{N: 1})
	tok := <-w.tokens
	w.waiting(id)

	w.call("POST", "/signals/"+tok[:len(tok)-2]+"xx", "", `{"status":"paid"}`).want(t, 404)
	w.call("POST", "/signals/not-a-token", "", `{}`).want(t, 404)
	if r := w.call("POST", "/signals/"+tok, "", `{"password":"x"}`).want(t, 422); r.problemType() != "invalid-input" {
		t.Fatalf("a secret-looking payload: %s", r.raw)
	}
	w.call("POST", "/signals/"+tok, "", `{"status":`).want(t, 400)
	if st := w.state(id); st != twicetype.JobStateWaiting {
		t.Fatalf("after refused signals the job is %s", st)
	}
	first := w.call("POST", "/signals/"+tok, "", `{"status":"paid"}`, "Idempotency-Key", `"cb-1"`).want(t, 200)
	if first.body["woke"] != true || first.body["duplicate"] != false || first.body["job_id"] != float64(id) || first.body["name"] != "paid" {
		t.Fatalf("the callback: %s", first.raw)
	}
	replay := w.call("POST", "/signals/"+tok, "", `{"status":"paid"}`, "Idempotency-Key", `"cb-1"`).want(t, 200)
	if replay.raw != first.raw {
		t.Fatalf("the retry with the same key: %s, want the first response replayed: %s", replay.raw, first.raw)
	}
	again := w.call("POST", "/signals/"+tok, "", `{"status":"refunded"}`).want(t, 200)
	if again.body["duplicate"] != true || again.body["woke"] != false {
		t.Fatalf("a second callback without a key: %s, want a duplicate", again.raw)
	}
	if out := w.output(id); out != `{"status":"paid"}` {
		t.Fatalf("the job's output %s, want the first callback's payload", out)
	}

	// The API token's route.
	id2 := w.enqueue(refundArgs{N: 2})
	w.waiting(id2)
	path := fmt.Sprintf("/jobs/%d/signals/approve", id2)
	w.call("POST", path, "", `{"approved":true}`).want(t, 401)
	w.call("POST", fmt.Sprintf("/jobs/%d/signals/approve", id2+100), apiToken, `{"approved":true}`).want(t, 404)
	r := w.call("POST", path, apiToken, `{"approved":true,"by":"ci","reason":"auto"}`).want(t, 200)
	if r.body["woke"] != true {
		t.Fatalf("the API signal: %s", r.raw)
	}
	if out := w.output(id2); !strings.Contains(out, `"by":"ci"`) {
		t.Fatalf("the job's output %s, want the API's decision", out)
	}
	if r := w.call("POST", path, apiToken, `{"approved":false}`).want(t, 200); r.body["duplicate"] != true {
		t.Fatalf("a repeat for the finished job: %s, want a duplicate", r.raw)
	}
	other := fmt.Sprintf("/jobs/%d/signals/other", id2)
	if r := w.call("POST", other, apiToken, `{"approved":false}`).want(t, 409); r.problemType() != "job-state-conflict" {
		t.Fatalf("a new signal for a finished job: %s", r.raw)
	}
}

// TestBrowserApprove: in a real browser, a reviewer types why, clicks
// Approve on a waiting job's page, confirms, and the job runs with the
// decision.
func TestBrowserApprove(t *testing.T) {
	t.Parallel()
	w := newWaitEnv(t)
	ctx := newChrome(t)
	id := w.enqueue(refundArgs{N: 3})
	w.waiting(id)
	page := w.srv.URL + apiMount + "/jobs/" + strconv.FormatInt(id, 10)
	do(t, ctx, "approve",
		chromedp.Navigate(page),
		chromedp.WaitVisible(chromedp.ID("waiting-for")),
		chromedp.SendKeys(chromedp.CSS(`#decide input[name="reason"]`), "refund within policy"),
		chromedp.Click(chromedp.ID("approve")),
		chromedp.WaitVisible(chromedp.ID("confirm")),
	)
	screenshot(t, ctx, "confirm-approve")
	if st := w.state(id); st != twicetype.JobStateWaiting {
		t.Fatalf("the job is %s before the approval was confirmed", st)
	}
	do(t, ctx, "confirm", chromedp.Click(chromedp.ID("confirm")), chromedp.WaitVisible(chromedp.ID("job-state")))
	if out := w.output(id); !strings.Contains(out, `"approved":true`) || !strings.Contains(out, "refund within policy") {
		t.Fatalf("the job's output %s, want the approval typed in the browser", out)
	}
}

// TestDashboardRunsAScheduledJobNow: a scheduled job's page offers Run
// now; confirmed, the job is due and a worker runs it.
func TestDashboardRunsAScheduledJobNow(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c, err := twice.NewClient(e.store, twice.Config{Registry: e.reg})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Enqueue(t.Context(), okArgs{N: 7}, &twice.EnqueueOpts{Delay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ids := strconv.FormatInt(res.Job.ID, 10)
	srv := httptest.NewServer(e.handler(twiceweb.Options{}))
	defer srv.Close()
	b := newBrowser(t, srv.URL)
	if _, body := b.get("/jobs/" + ids); !strings.Contains(body, `id="run-now"`) {
		t.Fatalf("a scheduled job's page has no Run now:\n%s", body)
	}
	status, body := b.confirm("/jobs/"+ids, "/jobs/run-now", url.Values{"id": {ids}, "reason": {"customer waiting"}}, "Run now job "+ids+"?")
	if status != http.StatusOK || strings.Contains(body, `id="run-now"`) {
		t.Fatalf("confirmed run-now: %d, want the job page without Run now (it is due):\n%s", status, body)
	}
	e.start()
	if n := waitfor.Recv(t, e.ran, "the job to run"); n != 7 {
		t.Fatalf("ran job %d, want 7", n)
	}
}
