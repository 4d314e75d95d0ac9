package twice_test

import (
	"context"
	"testing"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/testkit/enqueuecases"
	"github.com/twicejobs/twice/twicestore"
)

// TestEnqueueConformance runs the shared enqueue cases
// (internal/testkit/enqueuecases) through Client.EnqueueJSON, on SQLite
// and, when TWICE_TEST_POSTGRES is set, PostgreSQL: the Go half of the
// conformance suite whose SQL half twicepg's
// TestSQLEnqueueConformance runs through twice_enqueue. The kinds are
// published to the kind catalog as the SQL runner publishes them, and no
// registry knows them, so the catalog is all either path goes by.
func TestEnqueueConformance(t *testing.T) {
	t.Parallel()
	for name, open := range enqueueStores() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			store := open(t)
			if err := store.CatalogPublish(ctx, &twicestore.CatalogPublishParams{
				Node: enqueuecases.CatalogNode, Kinds: enqueuecases.Catalog()}); err != nil {
				t.Fatal(err)
			}
			c, err := twice.NewClient(store, testConfig(nil))
			if err != nil {
				t.Fatal(err)
			}
			for _, tc := range enqueuecases.Cases() {
				if !tc.RunsOnGo() {
					t.Logf("%s: SQL only: %s", tc.Name, tc.SQLOnly)
					continue
				}
				if tc.KnownDifference != "" {
					t.Logf("%s: known difference from SQL: %s", tc.Name, tc.KnownDifference)
				}
				t.Run(tc.Name, func(t *testing.T) {
					runGoEnqueueCase(t, store, c, tc)
				})
			}
		})
	}
}

// runGoEnqueueCase enqueues tc once (twice for a repeat) and checks the
// outcome and the jobs stored.
func runGoEnqueueCase(t *testing.T, store twicestore.Store, c *twice.Client, tc enqueuecases.Case) {
	ctx := context.Background()
	before := countJobs(t, store)
	enqueue := func() (*twice.EnqueueResult, error) {
		var raw []byte
		if tc.Args != "" {
			raw = []byte(tc.Args)
		}
		return c.EnqueueJSON(ctx, tc.Kind, raw, tc.Opts.Go())
	}
	res, err := enqueue()
	want := tc.Want
	if want.Refused != "" {
		if err := want.CheckGoErr(err); err != nil {
			t.Error(err)
		}
		if n := countJobs(t, store); n != before {
			t.Errorf("%d jobs after the refusal, want %d: a refused enqueue stores nothing", n, before)
		}
		return
	}
	if err != nil {
		t.Fatalf("refused: %v", err)
	}
	row, err := store.JobGet(ctx, &twicestore.JobGetParams{ID: res.Job.ID})
	if err != nil {
		t.Fatal(err)
	}
	if err := want.CheckStored(tc.Args, row); err != nil {
		t.Error(err)
	}
	if n := countJobs(t, store); n != before+1 {
		t.Errorf("%d jobs after the enqueue, want %d", n, before+1)
	}
	if want.RepeatIsDuplicate {
		again, err := enqueue()
		if err != nil {
			t.Fatalf("repeat: %v", err)
		}
		if !again.Duplicate || again.Job.ID != res.Job.ID {
			t.Errorf("repeat: duplicate %v, job %d; want the first job %d as a duplicate", again.Duplicate, again.Job.ID, res.Job.ID)
		}
		if n := countJobs(t, store); n != before+1 {
			t.Errorf("%d jobs after the repeat, want %d", n, before+1)
		}
	}
}
