package twiceweb_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/twicejobs/twice/internal/testkit/limitstest"
	"github.com/twicejobs/twice/twiceweb"
)

func TestLimitsPageChanges(t *testing.T) {
	t.Parallel()
	testLimitsPageChanges(t, newEnv(t))
}

func TestPostgresLimitsPageChanges(t *testing.T) {
	t.Parallel()
	testLimitsPageChanges(t, newPostgresEnv(t))
}

// testLimitsPageChanges: the stock dashboard's limits page overrides a
// kind's limits and a queue's concurrency through its forms (CSRF-checked,
// a reason required), shows the override against the compiled limits and
// the change in the history, and resets both; bad input is a 400 that
// changes nothing; a read-only dashboard shows no form and refuses the
// action.
func testLimitsPageChanges(t *testing.T, e *env) {
	limitstest.StartWorker(t, e.store)
	srv := httptest.NewServer(e.handlerWith(nil, twiceweb.Options{}))
	defer srv.Close()
	b := newBrowser(t, srv.URL)
	const kind = limitstest.Kind

	for name, form := range map[string]url.Values{
		"no reason":     {"kind": {kind}, "global": {"3"}},
		"bad count":     {"kind": {kind}, "global": {"three"}, "reason": {"r"}},
		"negative":      {"kind": {kind}, "per_key": {"-1"}, "reason": {"r"}},
		"bad rate":      {"kind": {kind}, "rate": {"5"}, "reason": {"r"}},
		"unknown kind":  {"kind": {"tenant.synk.v1"}, "global": {"3"}, "reason": {"r"}},
		"nothing given": {"kind": {kind}, "reason": {"r"}},
		"NUL in reason": {"kind": {kind}, "global": {"3"}, "reason": {"a\x00b"}},
	} {
		if status, body := b.post("/limits", "/limits/set", form); status != http.StatusBadRequest {
			t.Errorf("%s: POST /limits/set: %d, want 400\n%s", name, status, body)
		}
	}
	for name, form := range map[string]url.Values{
		"zero":          {"queue": {"default"}, "concurrency": {"0"}, "reason": {"r"}},
		"not a number":  {"queue": {"default"}, "concurrency": {"many"}, "reason": {"r"}},
		"unknown queue": {"queue": {"nowhere"}, "concurrency": {"2"}, "reason": {"r"}},
	} {
		if status, body := b.post("/limits", "/queues/scale", form); status != http.StatusBadRequest {
			t.Errorf("%s: POST /queues/scale: %d, want 400\n%s", name, status, body)
		}
	}
	if status, _ := b.postRaw("/limits/set", url.Values{"kind": {kind}, "global": {"3"}, "reason": {"r"}}); status != http.StatusForbidden {
		t.Errorf("POST /limits/set without a CSRF token: %d, want 403", status)
	}
	if _, body := b.get("/limits"); !strings.Contains(body, "no limit changed at runtime yet") {
		t.Fatalf("refused actions changed something:\n%s", body)
	}

	status, body := b.post("/limits", "/limits/set", url.Values{"kind": {kind}, "global": {"3"}, "rate": {"50/m"}, "reason": {"black friday"}})
	if status != http.StatusOK {
		t.Fatalf("POST /limits/set: %d\n%s", status, body)
	}
	for _, want := range []string{
		"global 3, per key 1, retries out of key order, rate 50/1m",
		`data-override="` + kind + `">override</span>`,
		"compiled: global 2, per key 1, retries out of key order, rate 100/1h",
		"compiled → global 3",
		"“black friday”",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("after the set the limits page lacks %q:\n%s", want, body)
		}
	}
	status, body = b.post("/limits", "/queues/scale", url.Values{"queue": {"default"}, "concurrency": {"4"}, "reason": {"backlog"}})
	if status != http.StatusOK || !strings.Contains(body, `data-concurrency="default"><strong>4</strong>`) {
		t.Fatalf("POST /queues/scale: %d\n%s", status, body)
	}
	b.post("/limits", "/queues/unscale", url.Values{"queue": {"default"}, "reason": {"done"}})
	status, body = b.post("/limits", "/limits/reset", url.Values{"kind": {kind}, "reason": {"over"}})
	if status != http.StatusOK || strings.Contains(body, `data-override="`) || !strings.Contains(body, "global 3, per key 1, retries out of key order, rate 50/1m → compiled") {
		t.Fatalf("after the resets: %d\n%s", status, body)
	}
	if logs := e.logs.String(); !strings.Contains(logs, `action="set limit"`) || !strings.Contains(logs, `action="scale queue"`) {
		t.Errorf("the actions were not logged:\n%s", logs)
	}

	ro := httptest.NewServer(e.handlerWith(nil, twiceweb.Options{ReadOnly: true}))
	defer ro.Close()
	rb := newBrowser(t, ro.URL)
	if _, body := rb.get("/limits"); strings.Contains(body, `action="/limits/set"`) || strings.Contains(body, `action="/queues/scale"`) {
		t.Errorf("the read-only limits page shows forms:\n%s", body)
	}
	if status, _ := rb.postRaw("/limits/set", url.Values{"kind": {kind}, "global": {"3"}, "reason": {"r"}}); status != http.StatusForbidden {
		t.Errorf("POST /limits/set on a read-only dashboard: %d, want 403", status)
	}
}
