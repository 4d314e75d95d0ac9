package convergence_test

import (
	"context"
	"os"
	"sync/atomic"
	"testing"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/examples/convergence"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetest"
)

// countingMailer counts the emails sent: the effect twicetest measures.
type countingMailer struct{ sent atomic.Int64 }

func (m *countingMailer) Send(context.Context, int64, string) error {
	m.sent.Add(1)
	return nil
}

func welcomeCase(pgURL string) twicetest.Case[convergence.WelcomeEmail] {
	m := &countingMailer{}
	return twicetest.Case[convergence.WelcomeEmail]{
		// The production registration, unchanged.
		Register: func(reg *twice.Registry) error { return convergence.Register(reg, m) },
		Args:     convergence.WelcomeEmail{UserID: 42},
		Effects:  func(context.Context, twicestore.Store) (int, error) { return int(m.sent.Load()), nil },
		// Empty runs each scenario on a fresh SQLite database.
		PostgresURL: pgURL,
	}
}

func TestWelcomeEmailConverges(t *testing.T) {
	rep := twicetest.RunTwice(t, welcomeCase(""))
	if rep.Strategy != twice.ClaimAfter {
		t.Errorf("strategy %s, want claim-after", rep.Strategy)
	}
	t.Log(rep)
}

// TestWelcomeEmailConvergesOnPostgres runs the same case on PostgreSQL; it
// is skipped without TWICE_TEST_POSTGRES.
func TestWelcomeEmailConvergesOnPostgres(t *testing.T) {
	url := os.Getenv("TWICE_TEST_POSTGRES")
	if url == "" {
		t.Skip("TWICE_TEST_POSTGRES is not set")
	}
	t.Log(twicetest.RunTwice(t, welcomeCase(url)))
}
