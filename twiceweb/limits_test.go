package twiceweb_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/twicejobs/twice/internal/testkit/limitstest"
	"github.com/twicejobs/twice/twiceweb"
)

func TestLimitsPage(t *testing.T) {
	t.Parallel()
	testLimitsPage(t, newEnv(t))
}

func TestPostgresLimitsPage(t *testing.T) {
	t.Parallel()
	testLimitsPage(t, newPostgresEnv(t))
}

// testLimitsPage (issue 13 item 6): the limits page shows a limited kind's
// limits, its running jobs against its slots, and the due jobs its limits
// hold back as throttled; bad bytes in its query are a 400; a dashboard
// whose registry limits nothing says so.
func testLimitsPage(t *testing.T, e *env) {
	// tenant.sync.v1: two jobs running; acme's later two wait for its
	// first, throttled by the key.
	reg := limitstest.StartWorker(t, e.store)

	srv := httptest.NewServer(e.handlerWith(reg, twiceweb.Options{}))
	defer srv.Close()
	b := newBrowser(t, srv.URL)
	status, body := b.get("/limits")
	if status != http.StatusOK {
		t.Fatalf("GET /limits: %d\n%s", status, body)
	}
	for _, want := range []string{
		`data-limit-kind="tenant.sync.v1"`,
		"global 2, per key 1, retries out of key order, rate 100/1h",
		`data-slots="tenant.sync.v1">2 / 2 <span class="badge paused">full</span>`,
		`data-due="tenant.sync.v1">2<`,
		`data-throttled="tenant.sync.v1"><span class="badge throttled">2 throttled</span>`,
		`data-keys="tenant.sync.v1">2 of 2<`,
		`data-rate="tenant.sync.v1">2 / 100 per 1h<`,
		"neither orphaned nor stuck",
		`href="/limits" class="active">Limits</a>`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the limits page lacks %q:\n%s", want, body)
		}
	}
	// Every page links to it.
	if _, body := b.get("/queues"); !strings.Contains(body, `href="/limits"`) {
		t.Errorf("the navigation has no link to /limits:\n%s", body)
	}

	for bad, want := range map[string]string{"%00": "contains a NUL byte", "%FF": "is not valid UTF-8"} {
		status, body := b.get("/limits?kind=web" + bad)
		if status != http.StatusBadRequest || !strings.Contains(body, want) {
			t.Errorf("GET /limits with %s in the query: %d, want 400 saying %q:\n%s", bad, status, want, body)
		}
		status, body = b.get("/limits" + bad)
		if status != http.StatusBadRequest || !strings.Contains(body, want) {
			t.Errorf("GET /limits%s: %d, want 400 saying %q:\n%s", bad, status, want, body)
		}
	}

	// A dashboard built without the kind's registration (the stock one)
	// shows the limits the live worker publishes in the catalog.
	plain := httptest.NewServer(e.handlerWith(nil, twiceweb.Options{}))
	defer plain.Close()
	if status, body := newBrowser(t, plain.URL).get("/limits"); status != http.StatusOK ||
		!strings.Contains(body, "global 2, per key 1, retries out of key order, rate 100/1h") ||
		!strings.Contains(body, `data-slots="tenant.sync.v1">2 / 2 `) {
		t.Errorf("GET /limits on a dashboard without the registration: %d\n%s", status, body)
	}
	if logs := e.logs.String(); strings.Contains(logs, "level=ERROR") {
		t.Errorf("the limits page logged an error:\n%s", logs)
	}
}
