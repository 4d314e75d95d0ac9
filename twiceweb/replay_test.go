package twiceweb_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
	"github.com/twicejobs/twice/twiceweb"
)

// TestRetryConfirmationPreviews (issue 25 item 5): the dead page's bulk
// retry asks for confirmation with the preview's counts per class, and
// the preview changes nothing.
func TestRetryConfirmationPreviews(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start()
	a, c := e.dead(1), e.dead(2)
	srv := httptest.NewServer(e.handler(twiceweb.Options{}))
	defer srv.Close()
	b := newBrowser(t, srv.URL)

	status, body := b.post("/dead", "/dead/retry", url.Values{"all": {"yes"}, "kind": {"web.boom.v1"}, "reason": {"provider fixed"}})
	want := "Preview: 0 no-op (the marker exists: no effect is repeated), 2 will run (the effect happens again), 0 uncertain"
	if status != http.StatusOK || !strings.Contains(body, want) || !strings.Contains(body, "0 blocked") {
		t.Fatalf("bulk retry confirmation: %d, want the preview %q in:\n%s", status, want, body)
	}
	for _, id := range []int64{a, c} {
		if st := e.state(id); st != twicetype.JobStateDead {
			t.Errorf("job %d is %s after the confirmation page, want still dead", id, st)
		}
	}
}

// TestRetryConfirmationCompleted: a bulk retry whose form asks for state
// completed previews the completed jobs and, confirmed, replays them: the
// handler's marker absorbs each replay, so none runs again.
func TestRetryConfirmationCompleted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start()
	a, c := e.enqueue(okArgs{N: 1}), e.enqueue(okArgs{N: 2})
	for _, id := range []int64{a, c} {
		e.await("job to complete", func() bool { return e.state(id) == twicetype.JobStateCompleted })
	}
	<-e.ran
	<-e.ran
	srv := httptest.NewServer(e.handler(twiceweb.Options{}))
	defer srv.Close()
	b := newBrowser(t, srv.URL)

	page := "/jobs/" + strconv.FormatInt(a, 10) // the dead page has no form with no dead job
	form := url.Values{"all": {"yes"}, "state": {"completed"}, "kind": {"web.ok.v1"}, "reason": {"lost the emails"}}
	status, body := b.post(page, "/dead/retry", form)
	if want := "Preview: 2 no-op"; status != http.StatusOK || !strings.Contains(body, want) || !strings.Contains(body, "all 2 completed jobs") {
		t.Fatalf("replay confirmation: %d, want %q for all 2 completed jobs in:\n%s", status, want, body)
	}
	form.Set("confirm", "yes")
	if status, body := b.post(page, "/dead/retry", form); status != http.StatusOK {
		t.Fatalf("confirmed replay: %d\n%s", status, body)
	}
	for _, id := range []int64{a, c} {
		e.await("job to complete again as a no-op", func() bool {
			j, err := e.store.JobGet(t.Context(), &twicestore.JobGetParams{ID: id})
			return err == nil && j.State == twicetype.JobStateCompleted && j.Note != ""
		})
	}
	if len(e.ran) != 0 {
		t.Errorf("%d handler calls during the replay, want none", len(e.ran))
	}
}
