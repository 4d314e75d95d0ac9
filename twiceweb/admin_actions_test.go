package twiceweb_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
	"github.com/twicejobs/twice/twiceweb"
)

// insertJob inserts a job through the store seam, as a worker binary this
// dashboard was not built with would enqueue it.
func (e *env) insertJob(kind, queue, args string) int64 {
	e.t.Helper()
	now := time.Now()
	res, err := e.store.JobInsertMany(e.t.Context(), &twicestore.JobInsertManyParams{Jobs: []*twicestore.JobInsertParams{{
		Kind: kind, Queue: queue, Args: []byte(args), MessageID: uuid.NewString(), Key: uuid.NewString(),
		MaxAttempts: 3, RunAt: now, CreatedAt: now,
	}}})
	if err != nil {
		e.t.Fatal(err)
	}
	return res.Jobs[0].Job.ID
}

func (e *env) job(id int64) *twicetype.JobRow {
	e.t.Helper()
	j, err := e.store.JobGet(e.t.Context(), &twicestore.JobGetParams{ID: id})
	if err != nil {
		e.t.Fatal(err)
	}
	return j
}

// confirm posts form to action twice: first the confirmation page is
// expected, then, confirmed, the action's answer.
func (b *browser) confirm(page, action string, form url.Values, question string) (int, string) {
	b.t.Helper()
	status, body := b.post(page, action, form)
	if status != http.StatusOK || !strings.Contains(body, question) {
		b.t.Fatalf("POST %s %v: %d, want the confirmation %q:\n%s", action, form, status, question, body)
	}
	form.Set("confirm", "yes")
	return b.post(page, action, form)
}

func TestJobCancelAndDelete(t *testing.T) {
	t.Parallel()
	testJobCancelAndDelete(t, newEnv(t))
}

func TestPostgresJobCancelAndDelete(t *testing.T) {
	t.Parallel()
	testJobCancelAndDelete(t, newPostgresEnv(t))
}

func testJobCancelAndDelete(t *testing.T, e *env) {
	srv := httptest.NewServer(e.handler(twiceweb.Options{}))
	defer srv.Close()
	b := newBrowser(t, srv.URL)
	id := e.enqueue(okArgs{N: 1}) // no worker: it waits
	page := "/jobs/" + strconv.FormatInt(id, 10)
	ids := strconv.FormatInt(id, 10)

	if status, body := b.post(page, "/jobs/cancel", url.Values{"id": {ids}}); status != http.StatusBadRequest || !strings.Contains(body, "a reason is required") {
		t.Errorf("cancel without a reason: %d, want 400:\n%s", status, body)
	}
	status, body := b.confirm(page, "/jobs/cancel", url.Values{"id": {ids}, "reason": {"customer asked"}}, "Cancel job "+ids+"?")
	if status != http.StatusOK || !strings.Contains(body, `id="job-state">cancelled<`) || !strings.Contains(body, "customer asked") {
		t.Fatalf("confirmed cancel: %d, want the job page showing it cancelled with the reason:\n%s", status, body)
	}
	j := e.job(id)
	if j.State != twicetype.JobStateCancelled || j.Cancel == nil || j.Cancel.By != "anonymous@127.0.0.1" || j.Cancel.Reason != "customer asked" {
		t.Errorf("after the cancel the job is %s, cancel %+v; want cancelled by anonymous@127.0.0.1 for the reason given", j.State, j.Cancel)
	}
	if logs := e.logs.String(); !strings.Contains(logs, `action="cancel job"`) || !strings.Contains(logs, `reason="customer asked"`) {
		t.Errorf("the cancel was not logged with who and why:\n%s", logs)
	}
	form := url.Values{"id": {ids}, "reason": {"again"}, "confirm": {"yes"}}
	if status, body := b.post(page, "/jobs/cancel", form); status != http.StatusConflict || !strings.Contains(body, "already finished") {
		t.Errorf("cancelling a cancelled job: %d, want 409 saying it finished:\n%s", status, body)
	}
	if status, body := b.post(page, "/jobs/cancel", url.Values{"id": {"999999"}, "reason": {"x"}, "confirm": {"yes"}}); status != http.StatusNotFound {
		t.Errorf("cancelling a job that does not exist: %d, want 404:\n%s", status, body)
	}

	status, body = b.confirm(page, "/jobs/retry", url.Values{"id": {ids}, "reason": {"customer changed their mind"}}, "Retry job "+ids+"?")
	if status != http.StatusOK || !strings.Contains(body, `id="job-state">available<`) {
		t.Fatalf("confirmed retry of the cancelled job: %d, want it available:\n%s", status, body)
	}

	// A running job: its cancel is a request its worker carries out; it
	// cannot be deleted meanwhile.
	now := time.Now()
	fetched, err := e.store.JobFetch(t.Context(), &twicestore.JobFetchParams{
		Queue: "default", Kinds: []string{"web.ok.v1"}, Limit: 1, Node: "n1", Now: now, LeaseUntil: now.Add(time.Hour),
	})
	if err != nil || len(fetched.Jobs) != 1 || fetched.Jobs[0].ID != id {
		t.Fatalf("fetch: %v %v, want job %d running", err, fetched, id)
	}
	del := url.Values{"id": {ids}, "reason": {"x"}, "confirm": {"yes"}}
	if status, body := b.post(page, "/jobs/delete", del); status != http.StatusConflict || !strings.Contains(body, "cancel it first") {
		t.Errorf("deleting a running job: %d, want 409 saying to cancel it first:\n%s", status, body)
	}
	status, body = b.post(page, "/jobs/cancel", url.Values{"id": {ids}, "reason": {"stuck on a provider"}, "confirm": {"yes"}})
	if status != http.StatusOK || !strings.Contains(body, `id="job-state">running<`) || !strings.Contains(body, `id="cancel-request"`) {
		t.Fatalf("cancel of a running job: %d, want its page showing it running with the cancel requested:\n%s", status, body)
	}
	if j := e.job(id); j.Cancel == nil || j.Cancel.Reason != "stuck on a provider" {
		t.Errorf("the running job's cancel request is %+v, want the reason given", j.Cancel)
	}
	if logs := e.logs.String(); !strings.Contains(logs, "running: cancel requested") {
		t.Errorf("the cancel request was not logged as one:\n%s", logs)
	}
	_, err = e.store.JobFinish(t.Context(), &twicestore.JobFinishParams{Outcomes: []*twicestore.JobOutcome{{
		ID: id, Epoch: fetched.Jobs[0].Epoch, State: twicetype.JobStateCancelled, FinishedAt: time.Now(), Note: j0Note(e, id),
	}}})
	if err != nil {
		t.Fatal(err)
	}

	status, body = b.confirm(page, "/jobs/delete", url.Values{"id": {ids}, "reason": {"test data"}}, "Delete job "+ids+"?")
	if status != http.StatusOK || !strings.Contains(body, "table class=\"jobs\"") {
		t.Fatalf("confirmed delete: %d, want the jobs page:\n%s", status, body)
	}
	if _, err := e.store.JobGet(t.Context(), &twicestore.JobGetParams{ID: id}); !errors.Is(err, twicestore.ErrNotFound) {
		t.Errorf("after the delete JobGet says %v, want not found", err)
	}
	if status, _ := b.get(page); status != http.StatusNotFound {
		t.Errorf("the deleted job's page: %d, want 404", status)
	}
}

func TestQueuePauseResume(t *testing.T) {
	t.Parallel()
	testQueuePauseResume(t, newEnv(t))
}

func TestPostgresQueuePauseResume(t *testing.T) {
	t.Parallel()
	testQueuePauseResume(t, newPostgresEnv(t))
}

func testQueuePauseResume(t *testing.T, e *env) {
	srv := httptest.NewServer(e.handler(twiceweb.Options{}))
	defer srv.Close()
	b := newBrowser(t, srv.URL)
	e.enqueue(okArgs{N: 1})
	c, err := twice.NewClient(e.store, twice.Config{Registry: e.reg})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Enqueue(t.Context(), okArgs{N: 2}, &twice.EnqueueOpts{Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		form url.Values
		want string
	}{
		{url.Values{"queue": {"default"}}, "a reason is required"},
		{url.Values{"queue": {"defualt"}, "reason": {"x"}}, "unknown queue"},
		{url.Values{"queue": {"default"}, "reason": {"x"}, "until": {"-5m"}}, "not in the future"},
		{url.Values{"queue": {"default"}, "reason": {"x"}, "until": {"2001-01-01T00:00"}}, "not in the future"},
		{url.Values{"queue": {"default"}, "reason": {"x"}, "until": {"soon"}}, "neither a duration"},
	} {
		if status, body := b.post("/queues", "/queues/pause", tc.form); status != http.StatusBadRequest || !strings.Contains(body, tc.want) {
			t.Errorf("pause %v: %d, want 400 saying %q:\n%s", tc.form, status, tc.want, body)
		}
	}
	status, body := b.post("/queues", "/queues/pause", url.Values{"queue": {"default"}, "reason": {"smtp incident"}, "until": {"2h"}})
	if status != http.StatusOK || !strings.Contains(body, `data-queue-state="default">paused<`) || !strings.Contains(body, "smtp incident") {
		t.Fatalf("pause: %d, want the queues page showing default paused with the reason:\n%s", status, body)
	}
	if !strings.Contains(body, `data-due="default">1<`) || !strings.Contains(body, `data-scheduled="default">1<`) {
		t.Errorf("the queues page does not count 1 due and 1 scheduled job in default:\n%s", body)
	}
	queues, err := c.QueueList(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range queues {
		if q.Name == "default" && (!q.Paused || q.Until.Before(time.Now().Add(time.Hour)) || q.By != "anonymous@127.0.0.1") {
			t.Errorf("after the pause the store has %+v; want paused for about 2h by anonymous@127.0.0.1", q)
		}
	}
	if _, body := b.get("/jobs?queue=default"); !strings.Contains(body, `<span class="badge paused">paused</span>`) {
		t.Errorf("the jobs listing does not show the paused queue's jobs as paused:\n%s", body)
	}
	if _, body := b.get("/jobs?queue=default&timing=scheduled"); strings.Count(body, "<tr data-job=") != 1 {
		t.Errorf("timing=scheduled does not list exactly the delayed job:\n%s", body)
	}
	if _, body := b.get("/jobs?queue=default&timing=due"); strings.Count(body, "<tr data-job=") != 1 {
		t.Errorf("timing=due does not list exactly the due job:\n%s", body)
	}
	if status, body := b.get("/jobs?timing=soon"); status != http.StatusBadRequest || !strings.Contains(body, "is not") {
		t.Errorf("timing=soon: %d, want 400:\n%s", status, body)
	}
	if _, body := b.get("/jobs?node=nobody"); strings.Contains(body, "<tr data-job=") {
		t.Errorf("node=nobody lists jobs:\n%s", body)
	}
	if _, body := b.get("/"); !strings.Contains(body, `class="badge paused"`) {
		t.Errorf("the overview does not show the queue as paused:\n%s", body)
	}
	status, body = b.post("/queues", "/queues/resume", url.Values{"queue": {"default"}, "reason": {"smtp back"}})
	if status != http.StatusOK || !strings.Contains(body, `data-queue-state="default">`) || strings.Contains(body, `data-queue-state="default">paused<`) {
		t.Fatalf("resume: %d, want the queues page showing default not paused:\n%s", status, body)
	}
	if status, body := b.post("/queues", "/queues/resume", url.Values{"queue": {"default"}, "reason": {"again"}}); status != http.StatusConflict || !strings.Contains(body, "not paused") {
		t.Errorf("resuming a queue that is not paused: %d, want 409:\n%s", status, body)
	}
	logs := e.logs.String()
	for _, want := range []string{`action="pause queue" what=default reason="smtp incident"`, `action="resume queue" what=default reason="smtp back"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("the log lacks %s:\n%s", want, logs)
		}
	}
}

func TestSwitchHistory(t *testing.T) {
	t.Parallel()
	testSwitchHistory(t, newEnv(t))
}

func TestPostgresSwitchHistory(t *testing.T) {
	t.Parallel()
	testSwitchHistory(t, newPostgresEnv(t))
}

func testSwitchHistory(t *testing.T, e *env) {
	srv := httptest.NewServer(e.handler(twiceweb.Options{}))
	defer srv.Close()
	b := newBrowser(t, srv.URL)
	b.post("/switches", "/switches/set", url.Values{"kind": {"web.ok.v1"}, "state": {"off"}, "reason": {"incident 7"}})
	b.post("/switches", "/switches/set", url.Values{"kind": {"web.ok.v1"}, "state": {"on"}, "reason": {"incident 7 over"}, "for": {"1h"}})
	if _, body := b.get("/switches"); !strings.Contains(body, `data-expires="web.ok.v1">expires `) {
		t.Errorf("the switches page does not show the switch's expiry:\n%s", body)
	}
	if status, body := b.post("/switches", "/switches/set", url.Values{"kind": {"web.ok.v1"}, "state": {"on"}, "reason": {"x"}, "for": {"-1h"}}); status != http.StatusBadRequest {
		t.Errorf("a switch that expires in the past: %d, want 400:\n%s", status, body)
	}
	b.post("/switches", "/switches/unset", url.Values{"kind": {"web.ok.v1"}, "reason": {"back to default"}})
	status, body := b.get("/switches/history?kind=web.ok.v1")
	if status != http.StatusOK || strings.Count(body, "<tr data-change=") != 3 {
		t.Fatalf("history: %d, want 3 changes:\n%s", status, body)
	}
	newest := strings.Index(body, "back to default")
	middle := strings.Index(body, "incident 7 over")
	oldest := strings.Index(body, "“incident 7”")
	if newest < 0 || middle < newest || oldest < middle || !strings.Contains(body, "anonymous@127.0.0.1") {
		t.Errorf("history does not list the three changes newest first with who and why:\n%s", body)
	}
	for _, want := range []string{`<span class="sw-none">none</span> → <span class="sw-off"`, `<span class="sw-off">off</span> → <span class="sw-on"`, `<span class="sw-on">on</span> → <span class="sw-none"`} {
		if !strings.Contains(body, want) {
			t.Errorf("history lacks the change %s:\n%s", want, body)
		}
	}
	if _, body := b.get("/switches"); !strings.Contains(body, `href="/switches/history?kind=web.ok.v1"`) {
		t.Errorf("the switches page does not link each kind's history")
	}
	if status, body := b.get("/switches/history?kind=web.ko.v1"); status != http.StatusBadRequest || !strings.Contains(body, "did you mean web.ok.v1?") {
		t.Errorf("history of an unknown kind: %d, want 400 with did you mean:\n%s", status, body)
	}
}

func TestScheduleRemoveAndTrigger(t *testing.T) {
	t.Parallel()
	testScheduleRemoveAndTrigger(t, newEnv(t))
}

func TestPostgresScheduleRemoveAndTrigger(t *testing.T) {
	t.Parallel()
	testScheduleRemoveAndTrigger(t, newPostgresEnv(t))
}

// recordOldSchedule records a skipped tick of a schedule that no code
// defines any more.
func (e *env) recordOldSchedule(name string) {
	e.t.Helper()
	now := time.Now()
	_, err := e.store.ScheduleTick(e.t.Context(), &twicestore.ScheduleTickParams{
		Name: name, Kind: "web.ok.v1", Spec: "@every 1h", TickAt: now.Truncate(time.Second), NextAt: now.Add(time.Hour),
		Outcome: twicetype.ScheduleSkipped,
	})
	if err != nil {
		e.t.Fatal(err)
	}
}

func testScheduleRemoveAndTrigger(t *testing.T, e *env) {
	e.recordOldSchedule("old-sweep")
	srv := httptest.NewServer(e.handler(twiceweb.Options{}))
	defer srv.Close()
	b := newBrowser(t, srv.URL)
	_, body := b.get("/recurring")
	if !strings.Contains(body, `data-remove="old-sweep"`) || strings.Contains(body, `data-remove="money-sweep"`) || !strings.Contains(body, `data-gone="old-sweep"`) {
		t.Errorf("the recurring page should offer to remove old-sweep (no code) and not money-sweep (registered here):\n%s", body)
	}
	if status, body := b.post("/recurring", "/recurring/remove", url.Values{"name": {"money-sweep"}, "reason": {"x"}, "confirm": {"yes"}}); status != http.StatusBadRequest || !strings.Contains(body, "still registers it") {
		t.Errorf("removing a registered schedule: %d, want 400:\n%s", status, body)
	}
	status, body := b.confirm("/recurring", "/recurring/remove", url.Values{"name": {"old-sweep"}, "reason": {"sweep retired"}}, "Remove schedule old-sweep?")
	if status != http.StatusOK || strings.Contains(body, `data-schedule="old-sweep"`) {
		t.Fatalf("confirmed remove: %d, want the recurring page without old-sweep:\n%s", status, body)
	}
	res, err := e.store.ScheduleList(t.Context(), &twicestore.ScheduleListParams{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range res.Schedules {
		if s.Name == "old-sweep" {
			t.Errorf("old-sweep is still in the store after its removal")
		}
	}

	form := url.Values{"name": {"money-sweep"}, "reason": {"month end run"}, "request": {"req-1"}}
	status, body = b.post("/recurring", "/recurring/trigger", form)
	if status != http.StatusOK || !strings.Contains(body, "<code>web.money.v1</code>") || !strings.Contains(body, `id="job-state">available<`) {
		t.Fatalf("trigger: %d, want the new job's page:\n%s", status, body)
	}
	b.post("/recurring", "/recurring/trigger", form) // the same form again: no second job
	jobs, err := e.store.JobList(t.Context(), &twicestore.JobListParams{Filter: twicestore.JobFilter{Kind: "web.money.v1"}, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs.Jobs) != 1 {
		t.Errorf("two submissions of one trigger form enqueued %d jobs, want 1", len(jobs.Jobs))
	}
	logs := e.logs.String()
	for _, want := range []string{`action="remove schedule" what=old-sweep reason="sweep retired"`, `action="trigger schedule" what=money-sweep`} {
		if !strings.Contains(logs, want) {
			t.Errorf("the log lacks %s:\n%s", want, logs)
		}
	}
}

// A dashboard built without the team's kinds still knows them from the
// catalog their worker published: switch state, fail-closed flag and
// sensitive fields. A kind in no catalog has its args hidden and is
// treated as fail-closed; a queue no live node works is stranded.
func TestCataloguedKinds(t *testing.T) {
	t.Parallel()
	testCataloguedKinds(t, newEnv(t))
}

func TestPostgresCataloguedKinds(t *testing.T) {
	t.Parallel()
	testCataloguedKinds(t, newPostgresEnv(t))
}

func testCataloguedKinds(t *testing.T, e *env) {
	e.start() // publishes the catalog of e.reg
	boom := e.dead(1)
	legacy := e.insertJob("web.legacy.v1", "default", `{"Secret":"s3cr3t"}`)
	e.insertJob("web.ok.v1", "reports", `{"N":1}`)
	// A live node of an older version: it handles web.legacy.v1 but
	// publishes no catalog.
	now := time.Now()
	if err := e.store.NodeHeartbeat(t.Context(), &twicestore.NodeHeartbeatParams{Node: &twicetype.Node{
		ID: "old-node", Host: "h", PID: 1, Queues: []string{"legacy"}, Kinds: []string{"web.legacy.v1"}, StartedAt: now, HeartbeatAt: now,
	}}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e.handlerWith(nil, twiceweb.Options{})) // the stock binary: no kinds of its own
	defer srv.Close()
	b := newBrowser(t, srv.URL)

	_, body := b.get("/switches")
	for _, want := range []string{
		`data-state="web.money.v1">off<`, `data-fail-closed="web.money.v1"><strong>yes</strong>`,
		`data-state="web.ok.v1">on<`, `data-fail-closed="web.ok.v1">no<`,
		`data-state="web.legacy.v1">off</span> <span class="muted" data-assumed="web.legacy.v1">assumed</span>`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the switches page lacks %s:\n%s", want, body)
		}
	}
	if strings.Contains(body, `">?<`) {
		t.Errorf("the switches page shows an unknown state:\n%s", body)
	}
	// Turning on a kind in no catalog asks first, as for a fail-closed one.
	if status, body := b.post("/switches", "/switches/set", url.Values{"kind": {"web.legacy.v1"}, "state": {"on"}, "reason": {"x"}}); status != http.StatusOK || !strings.Contains(body, "treated as one") {
		t.Errorf("turning on a kind in no catalog: %d, want a confirmation:\n%s", status, body)
	}

	_, body = b.get("/jobs/" + strconv.FormatInt(boom, 10))
	if strings.Contains(body, "hunter2") || !strings.Contains(body, "[redacted]") || !strings.Contains(body, `id="args"`) {
		t.Errorf("the job page of a catalogued kind does not show its args with the sensitive field redacted:\n%s", body)
	}
	_, body = b.get("/jobs/" + strconv.FormatInt(legacy, 10))
	if strings.Contains(body, "s3cr3t") || !strings.Contains(body, `id="args-hidden"`) {
		t.Errorf("the job page of a kind in no catalog shows its args:\n%s", body)
	}

	_, body = b.get("/jobs?" + url.Values{"node": {e.client.NodeID()}}.Encode())
	if !strings.Contains(body, `<tr data-job="`+strconv.FormatInt(boom, 10)+`">`) || strings.Contains(body, `<tr data-job="`+strconv.FormatInt(legacy, 10)+`">`) {
		t.Errorf("node=%s does not list exactly the jobs that node ran:\n%s", e.client.NodeID(), body)
	}
	_, body = b.get("/orphans")
	if !strings.Contains(body, `<tr data-stranded="reports">`) {
		t.Errorf("the orphans page does not list the stranded queue reports:\n%s", body)
	}
	if _, body = b.get("/queues"); !strings.Contains(body, `data-queue-state="reports">stranded<`) {
		t.Errorf("the queues page does not show reports as stranded:\n%s", body)
	}
	if _, body = b.get("/"); !strings.Contains(body, `data-count="stranded">1<`) {
		t.Errorf("the overview does not count one stranded queue:\n%s", body)
	}
}

// Every action is refused by a read-only dashboard, and none without its
// CSRF token.
func TestActionsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ro := httptest.NewServer(e.handler(twiceweb.Options{ReadOnly: true}))
	defer ro.Close()
	rw := httptest.NewServer(e.handler(twiceweb.Options{}))
	defer rw.Close()
	rb, wb := newBrowser(t, ro.URL), newBrowser(t, rw.URL)
	wb.get("/") // the CSRF cookie, without a token in the forms below
	for _, action := range []string{"/jobs/cancel", "/jobs/delete", "/queues/pause", "/queues/resume", "/recurring/remove", "/recurring/trigger",
		"/switches/set", "/switches/unset", "/dead/retry", "/dead/discard"} {
		if status, body := rb.postRaw(action, url.Values{}); status != http.StatusForbidden || !strings.Contains(body, "read-only") {
			t.Errorf("POST %s to a read-only dashboard: %d, want 403:\n%s", action, status, body)
		}
		if status, body := wb.postRaw(action, url.Values{"reason": {"x"}}); status != http.StatusForbidden || !strings.Contains(body, "CSRF") {
			t.Errorf("POST %s without a CSRF token: %d, want 403:\n%s", action, status, body)
		}
	}
	for _, page := range []string{"/queues", "/recurring", "/switches"} {
		if _, body := rb.get(page); strings.Contains(body, `method="post"`) {
			t.Errorf("the read-only %s page shows an action form", page)
		}
	}
}

// j0Note is the note a worker records when it ends a job as its cancel
// request asked.
func j0Note(e *env, id int64) string {
	if c := e.job(id).Cancel; c != nil {
		return c.Note()
	}
	return "cancelled"
}
