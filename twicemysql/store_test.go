package twicemysql

import (
	"database/sql"
	"testing"

	"go.uber.org/goleak"

	"github.com/twicejobs/twice/internal/testkit/mysqltest"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicestore/storetest"
)

func TestMain(m *testing.M) {
	skipExamplesWithoutServer()
	goleak.VerifyTestMain(m)
}

// openTemp opens a store on a database of its own, migrated, and closes it
// when the test ends.
func openTemp(t *testing.T) *Store {
	t.Helper()
	dsn, _ := mysqltest.Database(t, "twice_store")
	s, err := Open(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) twicestore.Store { return openTemp(t) })
}

// TestConformanceNew runs the suite on a store made by New over a pool the
// application opened itself, as go-sql-driver opens it by default: its
// sessions at the server's REPEATABLE READ (twice then begins each of its
// transactions at READ COMMITTED) and its statements prepared on the
// server (interpolateParams off), the other way every statement travels.
func TestConformanceNew(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) twicestore.Store {
		dsn, _ := mysqltest.Database(t, "twice_new")
		db, err := sql.Open("mysql", dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		s, err := New(t.Context(), db)
		if err != nil {
			t.Fatal(err)
		}
		if s.txOpts == nil {
			t.Fatal("New over REPEATABLE READ sessions begins its transactions at the session's level")
		}
		return s
	})
}
