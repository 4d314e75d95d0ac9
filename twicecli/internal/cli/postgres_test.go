package cli

import (
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
	testAdminCommands(t, s, "PostgreSQL")
}

// TestPostgresURLWorksForServeAndDemo: the commands that run the demo's
// kinds work on PostgreSQL too, its application tables included.
func TestPostgresURLWorksForServeAndDemo(t *testing.T) {
	t.Parallel()
	s := newPostgresSetup(t)
	testServeAndDemo(t, s, "PostgreSQL")
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
