package twice_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// TestAdminJobDiscard: a dead job is discarded; one in another state and
// an unknown id are refused, each with its own error, and left as they
// were.
func TestAdminJobDiscard(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, store twicestore.Store) {
		ctx := context.Background()
		c := adminClient(t, store, adminRegistry(t))
		mustEnqueue(t, c, monthlyReportArgs{CustomerID: 1}, nil)
		dead := leaseOne(t, store, "reports", "report.monthly.v1")
		if _, err := store.JobFinish(ctx, &twicestore.JobFinishParams{Outcomes: []*twicestore.JobOutcome{{
			ID: dead.ID, Epoch: dead.Epoch, State: twicetype.JobStateDead,
		}}}); err != nil {
			t.Fatal(err)
		}
		waiting := mustEnqueue(t, c, monthlyReportArgs{CustomerID: 2}, nil)

		res, err := c.JobDiscard(ctx, &twice.JobActionParams{IDs: []int64{dead.ID, waiting.ID, 999999}, By: "ops@test", Reason: "refunded by hand"})
		if err != nil {
			t.Fatal(err)
		}
		want := map[int64]error{dead.ID: nil, waiting.ID: twice.ErrJobNotDead, 999999: twice.ErrJobNotFound}
		if len(res.Jobs) != len(want) {
			t.Fatalf("%d results, want %d: %+v", len(res.Jobs), len(want), res.Jobs)
		}
		for _, r := range res.Jobs {
			switch w := want[r.ID]; {
			case w == nil && (!r.Changed || r.State != twicetype.JobStateDiscarded):
				t.Errorf("job %d: %+v, want discarded", r.ID, r)
			case w != nil && (r.Changed || !errors.Is(r.Err, w)):
				t.Errorf("job %d: %+v, want %v", r.ID, r, w)
			}
		}
		if st := mustGet(t, c, waiting.ID).State; st != twicetype.JobStateAvailable {
			t.Errorf("refused job is %s, want still available", st)
		}
		if _, err := c.JobDiscard(ctx, &twice.JobActionParams{}); !errors.Is(err, twice.ErrInvalidInput) {
			t.Errorf("discard with no selection: %v, want ErrInvalidInput", err)
		}
	})
}

// TestAdminMarkers: MarkerGet shows a claim and who made it;
// MarkerRelease deletes it once; a marker that is not there and a
// malformed name are errors that say so, and change nothing.
func TestAdminMarkers(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, store twicestore.Store) {
		ctx := context.Background()
		c := adminClient(t, store, adminRegistry(t))
		at := time.Now().Truncate(time.Millisecond)
		if _, err := store.MarkerClaim(ctx, &twicestore.MarkerParams{Handler: "billing.charge.v1", Key: "order-7", Now: at, JobID: 42, Epoch: 3}); err != nil {
			t.Fatal(err)
		}
		p := twice.MarkerParams{Handler: "billing.charge.v1", Key: "order-7"}
		m, err := c.MarkerGet(ctx, &p)
		if err != nil {
			t.Fatal(err)
		}
		if m.JobID != 42 || m.Epoch != 3 || !m.ProcessedAt.Equal(at) {
			t.Errorf("MarkerGet = %+v, want job 42, epoch 3, processed at %s", m, at)
		}

		for _, bad := range []twice.MarkerParams{{Handler: "billing.charge.v1"}, {Key: "order-7"}, {Handler: "billing.charge.v1", Key: "order\x00-7"}, {Handler: "billing\xff", Key: "order-7"}} {
			if _, err := c.MarkerGet(ctx, &bad); !errors.Is(err, twice.ErrInvalidInput) {
				t.Errorf("MarkerGet(%q, %q): %v, want ErrInvalidInput", bad.Handler, bad.Key, err)
			}
			if _, err := c.MarkerRelease(ctx, &twice.MarkerReleaseParams{MarkerParams: bad}); !errors.Is(err, twice.ErrInvalidInput) {
				t.Errorf("MarkerRelease(%q, %q): %v, want ErrInvalidInput", bad.Handler, bad.Key, err)
			}
		}
		typo := &twice.MarkerReleaseParams{MarkerParams: twice.MarkerParams{Handler: "billing.charge.v2", Key: "order-7"}}
		if _, err := c.MarkerRelease(ctx, typo); !errors.Is(err, twice.ErrMarkerNotFound) {
			t.Errorf("release of a marker that is not there: %v, want ErrMarkerNotFound", err)
		}
		if _, err := c.MarkerGet(ctx, &p); err != nil {
			t.Fatalf("the refused releases released the marker: %v", err)
		}

		released, err := c.MarkerRelease(ctx, &twice.MarkerReleaseParams{MarkerParams: p, By: "ops@test", Reason: "provider shows no charge"})
		if err != nil {
			t.Fatal(err)
		}
		if released.JobID != 42 {
			t.Errorf("released %+v, want the claim of job 42", released)
		}
		if _, err := c.MarkerGet(ctx, &p); !errors.Is(err, twice.ErrMarkerNotFound) {
			t.Errorf("MarkerGet after release: %v, want ErrMarkerNotFound", err)
		}
		if _, err := c.MarkerRelease(ctx, &twice.MarkerReleaseParams{MarkerParams: p}); !errors.Is(err, twice.ErrMarkerNotFound) {
			t.Errorf("second release: %v, want ErrMarkerNotFound", err)
		}
	})
}
