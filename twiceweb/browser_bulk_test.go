package twiceweb_test

import (
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/twicejobs/twice/twicetype"
	"github.com/twicejobs/twice/twiceweb"
)

// An operator selects all 50 jobs of the jobs page in a real browser,
// cancels them through the confirmation, which states the count, and the
// store has the 50 cancelled.
func TestBrowserBulkCancel(t *testing.T) {
	t.Parallel()
	testBrowserBulkCancel(t, newEnv(t))
}

func TestPostgresBrowserBulkCancel(t *testing.T) {
	t.Parallel()
	testBrowserBulkCancel(t, newPostgresEnv(t))
}

func testBrowserBulkCancel(t *testing.T, e *env) {
	ids := make([]int64, 50)
	for i := range ids {
		ids[i] = e.enqueue(okArgs{N: i}) // no worker: they wait
	}
	srv := httptest.NewServer(e.handler(twiceweb.Options{RefreshInterval: -1}))
	defer srv.Close()
	ctx := newChrome(t)

	do(t, ctx, "select all",
		chromedp.Navigate(srv.URL+"/jobs"),
		chromedp.WaitVisible(chromedp.ID("select-all")),
		chromedp.Click(chromedp.ID("select-all")),
	)
	if n := run(t, ctx, "count ticked", chromedp.Evaluate[int](`document.querySelectorAll('input[name="id"]:checked').length`)); n != 50 {
		t.Fatalf("select-all ticked %d boxes, want the page's 50", n)
	}
	screenshot(t, ctx, "bulk-selected")
	do(t, ctx, "cancel", chromedp.Click(chromedp.ID("bulk-cancel")), chromedp.WaitVisible(chromedp.ID("confirm")))
	if q := run(t, ctx, "read question", chromedp.Text(chromedp.ID("bulk-question"))); q != "Cancel 50 jobs?" {
		t.Errorf("the confirmation asks %q, want \"Cancel 50 jobs?\"", q)
	}
	screenshot(t, ctx, "bulk-confirm")
	for _, id := range ids {
		if s := e.state(id); s != twicetype.JobStateAvailable {
			t.Fatalf("job %d is %s before the cancel was confirmed", id, s)
		}
	}
	do(t, ctx, "confirm",
		chromedp.SendKeys(chromedp.CSS(`#bulk-confirm input[name="reason"]`), "bad import"),
		chromedp.Click(chromedp.ID("confirm")),
		chromedp.WaitVisible(chromedp.ID("bulk-result")),
	)
	screenshot(t, ctx, "bulk-result")
	if n := run(t, ctx, "read changed", chromedp.Text(chromedp.CSS(`[data-count="changed"]`))); n != "50" {
		t.Errorf("the result shows %s changed, want 50", n)
	}
	for _, id := range ids {
		if j := e.job(id); j.State != twicetype.JobStateCancelled || j.Cancel == nil || j.Cancel.Reason != "bad import" {
			t.Errorf("job %d is %s with cancel %+v, want cancelled for the reason typed", id, j.State, j.Cancel)
		}
	}
}

// An operator makes a scheduled job run now from the jobs list: it
// becomes due.
func TestBrowserBulkRunNow(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.enqueue(okArgs{N: 1}) // another job, left alone
	id := e.enqueueLater(okArgs{N: 2}, time.Hour)
	srv := httptest.NewServer(e.handler(twiceweb.Options{RefreshInterval: -1}))
	defer srv.Close()
	ctx := newChrome(t)
	box := `input[name="id"][value="` + strconv.FormatInt(id, 10) + `"]`
	do(t, ctx, "run now",
		chromedp.Navigate(srv.URL+"/jobs"),
		chromedp.WaitVisible(chromedp.CSS(box)),
		chromedp.Click(chromedp.CSS(box)),
		chromedp.Click(chromedp.ID("bulk-run-now")),
		chromedp.WaitVisible(chromedp.ID("confirm")),
	)
	if q := run(t, ctx, "read question", chromedp.Text(chromedp.ID("bulk-question"))); q != "Run now 1 job?" {
		t.Errorf("the confirmation asks %q, want \"Run now 1 job?\"", q)
	}
	if j := e.job(id); !j.RunAt.After(time.Now()) {
		t.Fatalf("the job is due at %v before the run now was confirmed", j.RunAt)
	}
	do(t, ctx, "confirm",
		chromedp.SendKeys(chromedp.CSS(`#bulk-confirm input[name="reason"]`), "customer waiting"),
		chromedp.Click(chromedp.ID("confirm")),
		chromedp.WaitVisible(chromedp.ID("bulk-result")),
	)
	if got := run(t, ctx, "read result", chromedp.Text(chromedp.ID("bulk-result"))); got != "Made due now 1 of 1 job." {
		t.Errorf("the result says %q, want \"Made due now 1 of 1 job.\"", got)
	}
	if j := e.job(id); j.State != twicetype.JobStateAvailable || j.RunAt.After(time.Now()) {
		t.Errorf("after run now the job is %s due at %v, want available and due", j.State, j.RunAt)
	}
}
