package cli

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/twicejobs/twice/internal/testkit/pgtest"
)

// newPostgresSetup is a setup whose --db is a schema of its own on the
// TWICE_TEST_POSTGRES server.
func newPostgresSetup(t *testing.T) *setup {
	t.Helper()
	u, _ := pgtest.Schema(t, "twice_cli")
	s := &setup{t: t, db: u}
	s.ok("migrate")
	return s
}

func TestPostgresURLWorksForTheAdminCommands(t *testing.T) {
	t.Parallel()
	s := newPostgresSetup(t)
	r := s.ok("enqueue", "ads.image-watermark.v1", `{"image_id": 7}`)
	if !strings.Contains(r.stdout, "enqueued job") {
		t.Fatalf("enqueue: %q", r.stdout)
	}
	r = s.ok("jobs", "--json")
	var jobs []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &jobs); err != nil || len(jobs) != 1 {
		t.Fatalf("jobs --json = %q (%v), want one job", r.stdout, err)
	}
	s.ok("jobs", "show", fmt.Sprint(jobs[0]["id"]))
	s.ok("dlq", "ls")
	r = s.ok("orphans")
	if !strings.Contains(r.stdout, "ads.image-watermark.v1") {
		t.Errorf("orphans does not list the waiting kind no worker handles: %q", r.stdout)
	}
	if r := s.run("enqueue", "ads.image-watermark.v2", `{}`); r.code != ExitUsage {
		t.Errorf("unknown kind on PostgreSQL: exit %d, want %d", r.code, ExitUsage)
	}
}

// TestPostgresURLWorksForServeAndDemo: the commands that run the demo's
// kinds work on PostgreSQL too, its application tables included.
func TestPostgresURLWorksForServeAndDemo(t *testing.T) {
	t.Parallel()
	s := newPostgresSetup(t)
	testServe(t, s)

	r := s.ok("demo", "--once", "--objects", t.TempDir())
	for _, want := range []string{"converged: every effect is what its strategy promises",
		"email.partner-verification.v1", "balance.credit.v1", "ads.image-watermark.v1"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("demo --once on PostgreSQL lacks %q:\n%s", want, r.stdout)
		}
	}
	// The run used --db: its jobs are there for inspection.
	var jobs []jobJSON
	if err := json.Unmarshal([]byte(s.ok("jobs", "--json", "--limit", "100").stdout), &jobs); err != nil || len(jobs) < 30 {
		t.Errorf("jobs after demo --once on PostgreSQL: %d jobs (%v)", len(jobs), err)
	}

	out := testDemoLive(t, s.db, "--objects", t.TempDir())
	for _, want := range []string{"twice dlq ls", "demo_outbox", "effects so far"} {
		if !strings.Contains(out, want) {
			t.Errorf("live demo on PostgreSQL lacks %q:\n%s", want, out)
		}
	}
}

// TestPostgresDemoHidesThePassword: the demo prints its database, but never
// a password in the URL.
func TestPostgresDemoHidesThePassword(t *testing.T) {
	t.Parallel()
	s := newPostgresSetup(t)
	u, err := url.Parse(s.db)
	if err != nil {
		t.Fatal(err)
	}
	if _, set := u.User.Password(); set {
		t.Skip("TWICE_TEST_POSTGRES has a password already")
	}
	// The local test server trusts its clients, so any password connects.
	u.User = url.UserPassword(u.User.Username(), "hunter2-secret")
	s.db = u.String()
	r := s.ok("demo", "--once", "--objects", t.TempDir())
	if strings.Contains(r.stdout+r.stderr, "hunter2-secret") {
		t.Errorf("demo --once printed the password:\n%s\n%s", r.stdout, r.stderr)
	}
}
