package twicemetrics_test

import (
	"io"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/testkit/pgtest"
	"github.com/twicejobs/twice/internal/testkit/whytest"
	"github.com/twicejobs/twice/twicemetrics"
	"github.com/twicejobs/twice/twicepg"
	"github.com/twicejobs/twice/twicesqlite"
	"github.com/twicejobs/twice/twicestore"
)

func TestMetricsWaitReasons(t *testing.T) {
	t.Parallel()
	store, err := twicesqlite.Open(t.Context(), filepath.Join(t.TempDir(), "twice.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	testMetricsWaitReasons(t, store)
}

func TestPostgresMetricsWaitReasons(t *testing.T) {
	t.Parallel()
	u, _ := pgtest.Schema(t, "metrics")
	store, err := twicepg.Open(t.Context(), u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	testMetricsWaitReasons(t, store)
}

// testMetricsWaitReasons (issue 25): with ReportWaitReasons, a scrape
// reports the due jobs that are not running by kind, queue and why; the
// scheduled and parked ones are not due and not counted.
func testMetricsWaitReasons(t *testing.T, store twicestore.Store) {
	db := whytest.Start(t, store)
	m := twicemetrics.New(store)
	client, err := twice.NewClient(store, twice.Config{Registry: db.Registry, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	m.ReportWaitReasons(client)
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	var got []string
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		if strings.HasPrefix(line, "twice_jobs_not_running{") {
			got = append(got, line)
		}
	}
	want := []string{
		`twice_jobs_not_running{kind="why.charge.v1",queue="default",reason="held"} 1`,
		`twice_jobs_not_running{kind="why.gone.v1",queue="default",reason="orphaned"} 1`,
		`twice_jobs_not_running{kind="why.held.v1",queue="default",reason="held"} 1`,
		`twice_jobs_not_running{kind="why.limited.v1",queue="default",reason="throttled"} 1`,
		`twice_jobs_not_running{kind="why.report.v1",queue="reports",reason="paused"} 1`,
		`twice_jobs_not_running{kind="why.slow.v1",queue="slow",reason="due"} 1`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("twice_jobs_not_running:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
