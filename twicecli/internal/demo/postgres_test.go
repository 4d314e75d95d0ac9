package demo

import (
	"strings"
	"testing"

	"github.com/twicejobs/twice/internal/testkit/pgtest"
)

// postgresURL returns a URL of a schema of the test's own (see pgtest).
func postgresURL(t *testing.T) string {
	u, _ := pgtest.Schema(t, "twice_demo")
	return u
}

func TestRunOnceConvergesOnPostgres(t *testing.T) {
	t.Parallel()
	convergesTwiceOn(t, postgresURL(t))
}

// TestCheckerCatchesDivergenceOnPostgres: the checker can fail on
// PostgreSQL too; a credit applied twice is caught.
func TestCheckerCatchesDivergenceOnPostgres(t *testing.T) {
	t.Parallel()
	catchesCreditAppliedTwiceOn(t, postgresURL(t))
}

func TestDisplayDBHidesThePassword(t *testing.T) {
	t.Parallel()
	got := displayDB("postgres://app:s3cret@db.internal:5432/app?sslmode=require")
	if strings.Contains(got, "s3cret") || !strings.Contains(got, "db.internal") {
		t.Errorf("displayDB = %q", got)
	}
	if got := displayDB("/tmp/x.db"); got != "/tmp/x.db" {
		t.Errorf("displayDB of a file = %q", got)
	}
}
