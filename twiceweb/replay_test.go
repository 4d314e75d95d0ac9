package twiceweb_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

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
