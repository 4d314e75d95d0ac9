package twiceweb_test

import (
	"errors"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/testkit/waitfor"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
	"github.com/twicejobs/twice/twiceweb"
)

// TestBrowserAdmin drives each action of the operator plane in a real
// browser: a job's cancel and delete, a queue's pause and resume, the
// switch history, a schedule's trigger and removal.
func TestBrowserAdmin(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.recordOldSchedule("old-sweep")
	srv := httptest.NewServer(e.handler(twiceweb.Options{RefreshInterval: -1}))
	defer srv.Close()
	ctx := newChrome(t)

	t.Run("cancel a waiting job from its page, then retry it", func(t *testing.T) {
		id := e.enqueue(okArgs{N: 1}) // no worker: it waits
		do(t, ctx, "cancel",
			chromedp.Navigate(srv.URL+"/jobs/"+strconv.FormatInt(id, 10)),
			chromedp.SendKeys(chromedp.CSS(`form[action$="/jobs/cancel"] input[name="reason"]`), "customer asked"),
			chromedp.Click(chromedp.ID("cancel")),
			chromedp.WaitVisible(chromedp.ID("confirm")),
		)
		screenshot(t, ctx, "confirm-cancel")
		if s := e.state(id); s != twicetype.JobStateAvailable {
			t.Fatalf("job is %s before the cancel was confirmed", s)
		}
		do(t, ctx, "confirm", chromedp.Click(chromedp.ID("confirm")), chromedp.WaitVisible(chromedp.ID("job-state")))
		if s := run(t, ctx, "read state", chromedp.Text(chromedp.ID("job-state"))); s != "cancelled" {
			t.Errorf("the job page shows %q after the cancel, want cancelled", s)
		}
		screenshot(t, ctx, "job-cancelled")
		if j := e.job(id); j.State != twicetype.JobStateCancelled || j.Cancel == nil || j.Cancel.Reason != "customer asked" {
			t.Errorf("the store has the job %s with cancel %+v, want cancelled for the reason typed", j.State, j.Cancel)
		}
		do(t, ctx, "retry the cancelled job",
			chromedp.SendKeys(chromedp.CSS(`form[action$="/jobs/retry"] input[name="reason"]`), "customer changed their mind"),
			chromedp.Click(chromedp.ID("retry-job")),
			chromedp.WaitVisible(chromedp.ID("confirm")),
			chromedp.Click(chromedp.ID("confirm")),
			chromedp.WaitVisible(chromedp.ID("job-state")),
		)
		if s := run(t, ctx, "read state", chromedp.Text(chromedp.ID("job-state"))); s != "available" {
			t.Errorf("the job page shows %q after the retry, want available", s)
		}
	})

	t.Run("delete a job from its page", func(t *testing.T) {
		id := e.enqueue(okArgs{N: 2})
		do(t, ctx, "delete",
			chromedp.Navigate(srv.URL+"/jobs/"+strconv.FormatInt(id, 10)),
			chromedp.SendKeys(chromedp.CSS(`form[action$="/jobs/delete"] input[name="reason"]`), "test data"),
			chromedp.Click(chromedp.ID("delete")),
			chromedp.WaitVisible(chromedp.ID("confirm")),
			chromedp.Click(chromedp.ID("confirm")),
			chromedp.WaitVisible(chromedp.CSS("table.jobs")),
		)
		if _, err := e.store.JobGet(t.Context(), &twicestore.JobGetParams{ID: id}); !errors.Is(err, twicestore.ErrNotFound) {
			t.Errorf("after the delete the store says %v, want not found", err)
		}
	})

	t.Run("pause and resume a queue", func(t *testing.T) {
		e.enqueue(okArgs{N: 3})
		row := `tr[data-queue="default"] `
		do(t, ctx, "pause",
			chromedp.Navigate(srv.URL+"/queues"),
			chromedp.SendKeys(chromedp.CSS(row+`input[name="reason"]`), "smtp incident"),
			chromedp.SendKeys(chromedp.CSS(row+`input[name="until"]`), "2h"),
			chromedp.Click(chromedp.CSS(`button[data-pause="default"]`)),
			chromedp.WaitVisible(chromedp.CSS(`[data-queue-state="default"].paused`)),
		)
		screenshot(t, ctx, "queue-paused")
		stats, err := e.store.JobQueueStats(t.Context(), &twicestore.JobQueueStatsParams{Now: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		want := 0
		for _, q := range stats.Queues {
			if q.Queue == "default" {
				want = q.Due
			}
		}
		if got := run(t, ctx, "read due", chromedp.Text(chromedp.CSS(`[data-due="default"]`))); got != strconv.Itoa(want) || want == 0 {
			t.Errorf("the paused queue shows %s due, want the store's %d (waiting, not stuck)", got, want)
		}
		do(t, ctx, "resume",
			chromedp.SendKeys(chromedp.CSS(row+`input[name="reason"]`), "smtp back"),
			chromedp.Click(chromedp.CSS(`button[data-resume="default"]`)),
			// No worker runs here, so the queue shows as stranded once resumed.
			chromedp.WaitVisible(chromedp.CSS(`[data-queue-state="default"].stranded`)),
		)
		if logs := e.logs.String(); !strings.Contains(logs, `reason="smtp incident"`) || !strings.Contains(logs, `reason="smtp back"`) {
			t.Errorf("pause and resume were not logged with their reasons:\n%s", logs)
		}
	})

	t.Run("a flip shows in the switch history", func(t *testing.T) {
		do(t, ctx, "switch off and open the history",
			chromedp.Navigate(srv.URL+"/switches"),
			chromedp.SendKeys(chromedp.CSS(`tr[data-kind="web.ok.v1"] input[name="reason"]`), "incident 9"),
			chromedp.Click(chromedp.CSS(`button[data-flip="web.ok.v1"]`)),
			chromedp.WaitVisible(chromedp.CSS(`[data-state="web.ok.v1"].sw-off`)),
			chromedp.Click(chromedp.CSS(`a[data-history="web.ok.v1"]`)),
			chromedp.WaitVisible(chromedp.CSS("table.history tr[data-change]")),
		)
		screenshot(t, ctx, "switch-history")
		got := run(t, ctx, "read history", chromedp.Text(chromedp.CSS("table.history tbody")))
		if !strings.Contains(got, "incident 9") || !strings.Contains(got, "none → off") || !strings.Contains(got, "anonymous@127.0.0.1") {
			t.Errorf("the history shows %q, want the flip with who and why", got)
		}
	})

	t.Run("run a schedule now", func(t *testing.T) {
		do(t, ctx, "trigger",
			chromedp.Navigate(srv.URL+"/recurring"),
			chromedp.SendKeys(chromedp.CSS(`tr[data-schedule="money-sweep"] form[action$="/recurring/trigger"] input[name="reason"]`), "month end"),
			chromedp.Click(chromedp.CSS(`button[data-trigger="money-sweep"]`)),
			chromedp.WaitVisible(chromedp.ID("job-state")),
		)
		if got := run(t, ctx, "read kind", chromedp.Text(chromedp.CSS("main p code"))); got != "web.money.v1" {
			t.Errorf("the trigger led to a job of kind %q, want web.money.v1", got)
		}
	})

	t.Run("remove a schedule no code defines", func(t *testing.T) {
		do(t, ctx, "remove",
			chromedp.Navigate(srv.URL+"/recurring"),
			chromedp.SendKeys(chromedp.CSS(`tr[data-schedule="old-sweep"] form[action$="/recurring/remove"] input[name="reason"]`), "retired"),
			chromedp.Click(chromedp.CSS(`button[data-remove="old-sweep"]`)),
			chromedp.WaitVisible(chromedp.ID("confirm")),
			chromedp.Click(chromedp.ID("confirm")),
			chromedp.WaitVisible(chromedp.CSS(`tr[data-schedule="money-sweep"]`)),
		)
		if n := run(t, ctx, "count old-sweep", chromedp.Evaluate[int](`document.querySelectorAll('tr[data-schedule="old-sweep"]').length`)); n != 0 {
			t.Errorf("old-sweep is still listed after its removal")
		}
		screenshot(t, ctx, "recurring-after-remove")
	})
}

// An operator's cancel of a running job, clicked in the browser, reaches
// its handler on the node running it (at once on PostgreSQL through
// NOTIFY, by the cancel poll on SQLite) and the job ends cancelled.
func TestBrowserCancelRunning(t *testing.T) {
	t.Parallel()
	testBrowserCancelRunning(t, newEnv(t))
}

func TestPostgresBrowserCancelRunning(t *testing.T) {
	t.Parallel()
	testBrowserCancelRunning(t, newPostgresEnv(t))
}

func testBrowserCancelRunning(t *testing.T, e *env) {
	e.startWith(3 * time.Second) // a heartbeat every second
	id := e.enqueue(slowArgs{N: 1})
	if got := waitfor.Recv(t, e.started, "the slow job to start"); got != id {
		t.Fatalf("job %d started, want %d", got, id)
	}
	srv := httptest.NewServer(e.handler(twiceweb.Options{RefreshInterval: -1}))
	defer srv.Close()
	ctx := newChrome(t)
	page := srv.URL + "/jobs/" + strconv.FormatInt(id, 10)
	do(t, ctx, "cancel the running job",
		chromedp.Navigate(page),
		chromedp.SendKeys(chromedp.CSS(`form[action$="/jobs/cancel"] input[name="reason"]`), "stuck on the provider"),
		chromedp.Click(chromedp.ID("cancel")),
		chromedp.WaitVisible(chromedp.ID("confirm")),
	)
	start := time.Now()
	// The page after the confirm shows the request, or, if the worker was
	// quicker, the job cancelled already.
	do(t, ctx, "confirm", chromedp.Click(chromedp.ID("confirm")), chromedp.WaitVisible(chromedp.ID("job-state")))
	cause := waitfor.Recv(t, e.ended, "the cancel to reach the running handler")
	t.Logf("the handler's context ended %v after the confirm click (%s)", time.Since(start).Round(time.Millisecond), cause)
	if !errors.Is(cause, twice.ErrJobCancelled) {
		t.Errorf("the handler's context ended with %v, want twice.ErrJobCancelled", cause)
	}
	e.await("the job to end cancelled", func() bool { return e.state(id) == twicetype.JobStateCancelled })
	do(t, ctx, "reload", chromedp.Navigate(page), chromedp.WaitVisible(chromedp.ID("job-state")))
	if s := run(t, ctx, "read state", chromedp.Text(chromedp.ID("job-state"))); s != "cancelled" {
		t.Errorf("the job page shows %q, want cancelled", s)
	}
	screenshot(t, ctx, "running-job-cancelled")
}
