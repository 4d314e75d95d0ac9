package twicemysql

import (
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
