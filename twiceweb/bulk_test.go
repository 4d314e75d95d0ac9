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

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
	"github.com/twicejobs/twice/twiceweb"
)

// enqueueLater enqueues args due after delay and returns the job id.
func (e *env) enqueueLater(args twice.Args, delay time.Duration) int64 {
	e.t.Helper()
	c, err := twice.NewClient(e.store, twice.Config{Registry: e.reg})
	if err != nil {
		e.t.Fatal(err)
	}
	res, err := c.Enqueue(e.t.Context(), args, &twice.EnqueueOpts{Delay: delay})
	if err != nil {
		e.t.Fatal(err)
	}
	return res.Job.ID
}

// idValues renders ids as a form's values.
func idValues(ids ...int64) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = strconv.FormatInt(id, 10)
	}
	return out
}

func TestBulkActions(t *testing.T) {
	t.Parallel()
	testBulkActions(t, newEnv(t))
}

func TestPostgresBulkActions(t *testing.T) {
	t.Parallel()
	testBulkActions(t, newPostgresEnv(t))
}

func testBulkActions(t *testing.T, e *env) {
	srv := httptest.NewServer(e.handler(twiceweb.Options{}))
	defer srv.Close()
	b := newBrowser(t, srv.URL)
	var ids []int64
	for i := range 5 {
		ids = append(ids, e.enqueue(okArgs{N: i})) // no worker: they wait
	}
	states := func(want twicetype.JobState) {
		t.Helper()
		for _, id := range ids {
			if s := e.state(id); s != want {
				t.Fatalf("job %d is %s, want %s", id, s, want)
			}
		}
	}

	t.Run("the jobs page offers a box per row", func(t *testing.T) {
		_, body := b.get("/jobs")
		for _, id := range idValues(ids...) {
			if !strings.Contains(body, `name="id" value="`+id+`"`) {
				t.Errorf("the jobs page has no box for job %s", id)
			}
		}
		if !strings.Contains(body, `id="select-all"`) || !strings.Contains(body, `value="run-now"`) {
			t.Errorf("the jobs page lacks the select-all box or the bulk buttons:\n%s", body)
		}
	})

	t.Run("bad input changes nothing", func(t *testing.T) {
		tooMany := make([]int64, twice.JobListLimitMax+1)
		for i := range tooMany {
			tooMany[i] = int64(i + 1)
		}
		for _, c := range []struct {
			name string
			form url.Values
			want string
		}{
			{"no selection", url.Values{"action": {"cancel"}}, "no job selected"},
			{"no selection, confirmed", url.Values{"action": {"cancel"}, "confirm": {"yes"}, "reason": {"x"}}, "no job selected"},
			{"an id that is no number", url.Values{"action": {"cancel"}, "id": {"12x"}}, `id &#34;12x&#34; is not a job id`},
			{"a negative id", url.Values{"action": {"delete"}, "id": {"-3"}}, "is not a job id"},
			{"an unknown action", url.Values{"action": {"explode"}, "id": idValues(ids...)}, "is not a bulk action"},
			{"too many ids", url.Values{"action": {"cancel"}, "id": idValues(tooMany...)}, "1001 jobs selected, more than the 1000"},
			{"no reason", url.Values{"action": {"cancel"}, "id": idValues(ids...), "confirm": {"yes"}}, "a reason is required"},
			{"a reason too long", url.Values{"action": {"cancel"}, "id": idValues(ids...), "confirm": {"yes"}, "reason": {strings.Repeat("x", twice.MaxReasonBytes+1)}}, "over the 1024-byte limit"},
			{"a form too large", url.Values{"action": {"cancel"}, "id": idValues(ids...), "reason": {strings.Repeat("x", 100_000)}}, "select fewer jobs at once"},
		} {
			status, body := b.post("/jobs", "/jobs/bulk", c.form)
			if status != http.StatusBadRequest || !strings.Contains(body, c.want) {
				t.Errorf("%s: %d, want 400 saying %q:\n%s", c.name, status, c.want, body)
			}
		}
		states(twicetype.JobStateAvailable)
	})

	t.Run("the confirmation states the count and changes nothing", func(t *testing.T) {
		status, body := b.post("/jobs", "/jobs/bulk", url.Values{"action": {"cancel"}, "id": idValues(ids...)})
		if status != http.StatusOK || !strings.Contains(body, "Cancel 5 jobs?") || !strings.Contains(body, `name="reason" required`) {
			t.Fatalf("bulk cancel unconfirmed: %d, want the confirmation of 5 jobs with a reason field:\n%s", status, body)
		}
		for _, id := range idValues(ids...) {
			if !strings.Contains(body, `<input type="hidden" name="id" value="`+id+`">`) {
				t.Errorf("the confirmation does not carry job %s", id)
			}
		}
		states(twicetype.JobStateAvailable)
	})

	t.Run("every job on the page, without the script", func(t *testing.T) {
		status, body := b.post("/jobs", "/jobs/bulk", url.Values{"action": {"cancel"}, "all": {"page"}, "page_id": idValues(ids...), "id": idValues(ids[0])})
		if status != http.StatusOK || !strings.Contains(body, "Cancel 5 jobs?") {
			t.Fatalf("all on the page: %d, want the confirmation of 5 jobs:\n%s", status, body)
		}
		states(twicetype.JobStateAvailable)
	})

	gone := ids[4]
	if _, err := e.store.JobDelete(t.Context(), &twicestore.JobBulkParams{Filter: twicestore.JobFilter{IDs: []int64{gone}}, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	ids = ids[:4]

	t.Run("cancel, with a job that no longer exists", func(t *testing.T) {
		status, body := b.confirm("/jobs", "/jobs/bulk",
			url.Values{"action": {"cancel"}, "id": idValues(append(ids, gone)...), "reason": {"bad batch"}}, "Cancel 5 jobs?")
		if status != http.StatusOK || !strings.Contains(body, "Cancelled 4 of 5 jobs.") ||
			!strings.Contains(body, `data-count="skipped">1<`) || !strings.Contains(body, "no longer exists") {
			t.Fatalf("confirmed bulk cancel: %d, want 4 cancelled and the missing one reported:\n%s", status, body)
		}
		states(twicetype.JobStateCancelled)
		if j := e.job(ids[0]); j.Cancel == nil || j.Cancel.Reason != "bad batch" || !strings.HasPrefix(j.Cancel.By, "anonymous@") {
			t.Errorf("the cancel is recorded as %+v, want who and the reason typed", j.Cancel)
		}
		if logs := e.logs.String(); !strings.Contains(logs, `action="cancel jobs"`) || !strings.Contains(logs, `reason="bad batch"`) {
			t.Errorf("the bulk cancel was not logged with who and why:\n%s", logs)
		}
	})

	t.Run("retry previews, then retries", func(t *testing.T) {
		status, body := b.post("/jobs", "/jobs/bulk", url.Values{"action": {"retry"}, "id": idValues(ids...)})
		if status != http.StatusOK || !strings.Contains(body, "Retry 4 jobs?") || !strings.Contains(body, "Preview: 0 no-op") ||
			!strings.Contains(body, "4 will run") {
			t.Fatalf("bulk retry unconfirmed: %d, want the confirmation with the replay preview:\n%s", status, body)
		}
		states(twicetype.JobStateCancelled)
		status, body = b.confirm("/jobs", "/jobs/bulk", url.Values{"action": {"retry"}, "id": idValues(ids...), "reason": {"fixed"}}, "Retry 4 jobs?")
		if status != http.StatusOK || !strings.Contains(body, "Retried 4 of 4 jobs.") {
			t.Fatalf("confirmed bulk retry: %d, want 4 retried:\n%s", status, body)
		}
		states(twicetype.JobStateAvailable)
	})

	t.Run("run now makes scheduled jobs due and skips the rest", func(t *testing.T) {
		later := e.enqueueLater(okArgs{N: 50}, time.Hour)
		done := e.enqueue(okArgs{N: 51})
		if _, err := e.store.JobCancel(t.Context(), &twicestore.JobCancelParams{Filter: twicestore.JobFilter{IDs: []int64{done}}, Now: time.Now()}); err != nil {
			t.Fatal(err)
		}
		status, body := b.confirm("/jobs", "/jobs/bulk", url.Values{"action": {"run-now"}, "id": idValues(later, done), "reason": {"customer waiting"}}, "Run now 2 jobs?")
		if status != http.StatusOK || !strings.Contains(body, "Made due now 1 of 2 jobs.") || !strings.Contains(body, "is cancelled") {
			t.Fatalf("confirmed bulk run now: %d, want 1 made due and the cancelled one skipped:\n%s", status, body)
		}
		if j := e.job(later); j.State != twicetype.JobStateAvailable || j.RunAt.After(time.Now()) {
			t.Errorf("after run now the job is %s due %v, want available and due", j.State, j.RunAt)
		}
	})

	t.Run("delete", func(t *testing.T) {
		status, body := b.confirm("/jobs", "/jobs/bulk", url.Values{"action": {"delete"}, "id": idValues(ids...), "reason": {"test data"}}, "Delete 4 jobs?")
		if status != http.StatusOK || !strings.Contains(body, "Deleted 4 of 4 jobs.") {
			t.Fatalf("confirmed bulk delete: %d, want 4 deleted:\n%s", status, body)
		}
		for _, id := range ids {
			if _, err := e.store.JobGet(t.Context(), &twicestore.JobGetParams{ID: id}); !errors.Is(err, twicestore.ErrNotFound) {
				t.Errorf("job %d after the delete: %v, want not found", id, err)
			}
		}
	})

	t.Run("a form without its CSRF token is refused", func(t *testing.T) {
		id := e.enqueue(okArgs{N: 60})
		status, _ := b.postRaw("/jobs/bulk", url.Values{"action": {"cancel"}, "id": idValues(id), "confirm": {"yes"}, "reason": {"forged"}})
		if status != http.StatusForbidden {
			t.Errorf("bulk cancel without a CSRF token: %d, want 403", status)
		}
		if s := e.state(id); s != twicetype.JobStateAvailable {
			t.Errorf("the refused form left the job %s", s)
		}
	})
}

func TestBulkReadOnly(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	srv := httptest.NewServer(e.handler(twiceweb.Options{ReadOnly: true}))
	defer srv.Close()
	b := newBrowser(t, srv.URL)
	id := e.enqueue(okArgs{N: 1})
	if _, body := b.get("/jobs"); strings.Contains(body, `type="checkbox"`) || strings.Contains(body, "/jobs/bulk") {
		t.Errorf("the read-only jobs page offers bulk actions:\n%s", body)
	}
	status, body := b.postRaw("/jobs/bulk", url.Values{"action": {"cancel"}, "id": idValues(id), "confirm": {"yes"}, "reason": {"x"}})
	if status != http.StatusForbidden || !strings.Contains(body, "read-only") {
		t.Errorf("bulk cancel on a read-only dashboard: %d, want 403 saying it is read-only:\n%s", status, body)
	}
	if s := e.state(id); s != twicetype.JobStateAvailable {
		t.Errorf("the refused form left the job %s", s)
	}
}
