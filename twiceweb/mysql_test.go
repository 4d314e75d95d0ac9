package twiceweb_test

import (
	"testing"

	"github.com/twicejobs/twice/internal/testkit/mysqltest"
	"github.com/twicejobs/twice/twicemysql"
)

// newMySQLEnv is an env in a database of its own on TWICE_TEST_MYSQL; it
// skips without the variable.
func newMySQLEnv(t *testing.T) *env {
	t.Helper()
	dsn, _ := mysqltest.Database(t, "twiceweb")
	store, err := twicemysql.Open(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := store.Close(); err != nil {
			t.Error(err)
		}
	})
	return newEnvOn(t, store)
}

// TestMySQLDashboard runs the dashboard's checks that run on SQLite and
// PostgreSQL on MySQL too: its pages and every admin action, over the
// test's own kinds, through the stock handler.
func TestMySQLDashboard(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		run  func(*testing.T, *env)
	}{
		{"PagesRender", testPagesRender},
		{"RetryAndDiscard", testRetryAndDiscard},
		{"JobCancelAndDelete", testJobCancelAndDelete},
		{"QueuePauseResume", testQueuePauseResume},
		{"SwitchHistory", testSwitchHistory},
		{"ScheduleRemoveAndTrigger", testScheduleRemoveAndTrigger},
		{"CataloguedKinds", testCataloguedKinds},
		{"BulkActions", testBulkActions},
		{"KindDrainPage", testKindDrainPage},
		{"BadBytes", testBadBytes},
		{"ListingsWithHugeErrors", testListingsWithHugeErrors},
		{"APIJobSearchAndDetail", testAPIJobSearchAndDetail},
		{"LimitsPage", testLimitsPage},
		{"LimitsPageChanges", testLimitsPageChanges},
		{"JobsWhy", testJobsWhy},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, newMySQLEnv(t))
		})
	}
}

// TestMySQLBrowser drives the dashboard on MySQL in headless Chromium, as
// the PostgreSQL twins do: a running job cancelled from its page, and 50
// jobs selected and cancelled at once.
func TestMySQLBrowser(t *testing.T) {
	t.Parallel()
	t.Run("CancelRunning", func(t *testing.T) { testBrowserCancelRunning(t, newMySQLEnv(t)) })
	t.Run("BulkCancel", func(t *testing.T) { testBrowserBulkCancel(t, newMySQLEnv(t)) })
}
