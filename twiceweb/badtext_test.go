package twiceweb_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twiceweb"
)

// TestTextOverCapIsBadInput: text the dashboard's own door lets through
// (UTF-8 without NUL) but over the admin API's cap is a 400 with the API's
// message, not a 500, on pages and actions alike.
func TestTextOverCapIsBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	srv := httptest.NewServer(e.handler(twiceweb.Options{}))
	defer srv.Close()
	b := newBrowser(t, srv.URL)
	long := strings.Repeat("a", twice.MaxKindBytes+1)
	if status, body := b.get("/jobs?kind=" + long); status != http.StatusBadRequest || !strings.Contains(body, "over the 255-byte limit") {
		t.Errorf("GET /jobs with a %d-byte kind: %d, want 400 naming the limit:\n%s", len(long), status, body)
	}
	reason := strings.Repeat("r", twice.MaxReasonBytes+1)
	for _, tc := range []struct {
		page, action string
		form         url.Values
	}{
		{"/switches", "/switches/set", url.Values{"kind": {"web.ok.v1"}, "state": {"off"}, "reason": {reason}}},
		{"/queues", "/queues/pause", url.Values{"queue": {twice.QueueDefault}, "reason": {reason}}},
	} {
		status, body := b.post(tc.page, tc.action, tc.form)
		if status != http.StatusBadRequest || !strings.Contains(body, "over the 1024-byte limit") {
			t.Errorf("POST %s with a %d-byte reason: %d, want 400 naming the limit:\n%s", tc.action, len(reason), status, body)
		}
	}
}
