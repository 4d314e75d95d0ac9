package twiceweb_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twiceweb"
)

// syncArgs is a limited kind: one sync per tenant at a time, two at most
// across the cluster, a hundred starts an hour.
type syncArgs struct {
	Tenant string `json:"tenant"`
}

func (syncArgs) Kind() string { return "web.sync.v1" }

// limitedRegistry registers web.sync.v1 with its limits and a handler
// that reports each start on started and holds the job until release
// closes.
func limitedRegistry(started chan<- string, release <-chan struct{}) *twice.Registry {
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[syncArgs](func(ctx context.Context, j *twice.Job[syncArgs]) error {
		started <- j.Args.Tenant
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}), &twice.KindOpts{
		GlobalConcurrency:    2,
		KeyConcurrency:       1,
		KeyOrderSkipsRetries: true,
		ConcurrencyKey:       "tenant",
		// An hour long, so the starts stay in the window however slow
		// the machine.
		RateLimit: twice.RateLimit{Limit: 100, Period: time.Hour},
	})
	return reg
}

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
	started := make(chan string, 8)
	release := make(chan struct{})
	reg := limitedRegistry(started, release)
	worker, err := twice.NewClient(e.store, twice.Config{Registry: reg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	// Acme's later two jobs wait for its first: throttled by the key.
	for _, tenant := range []string{"acme", "acme", "acme", "globex"} {
		if _, err := worker.Enqueue(t.Context(), syncArgs{Tenant: tenant}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := worker.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		close(release)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := worker.Stop(ctx); err != nil {
			t.Errorf("stop the worker: %v", err)
		}
	})
	got := map[string]bool{}
	timeout := time.After(30 * time.Second)
	for len(got) < 2 {
		select {
		case tenant := <-started:
			got[tenant] = true
		case <-timeout:
			t.Fatalf("the limited jobs did not start in 30s; started: %v", got)
		}
	}

	srv := httptest.NewServer(e.handlerWith(reg, twiceweb.Options{}))
	defer srv.Close()
	b := newBrowser(t, srv.URL)
	status, body := b.get("/limits")
	if status != http.StatusOK {
		t.Fatalf("GET /limits: %d\n%s", status, body)
	}
	for _, want := range []string{
		`data-limit-kind="web.sync.v1"`,
		"global 2, per key 1, retries out of key order, rate 100/1h",
		`data-slots="web.sync.v1">2 / 2 <span class="badge paused">full</span>`,
		`data-due="web.sync.v1">2<`,
		`data-throttled="web.sync.v1"><span class="badge throttled">2 throttled</span>`,
		`data-keys="web.sync.v1">2 of 2<`,
		`data-rate="web.sync.v1">2 / 100 per 1h<`,
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

	// A dashboard built without the kind's registration knows no limits.
	plain := httptest.NewServer(e.handlerWith(nil, twiceweb.Options{}))
	defer plain.Close()
	if status, body := newBrowser(t, plain.URL).get("/limits"); status != http.StatusOK || !strings.Contains(body, "no limited kind") {
		t.Errorf("GET /limits without limited kinds: %d\n%s", status, body)
	}
	if logs := e.logs.String(); strings.Contains(logs, "level=ERROR") {
		t.Errorf("the limits page logged an error:\n%s", logs)
	}
}
