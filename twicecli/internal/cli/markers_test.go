package cli

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/twicejobs/twice/twicestore"
)

func TestMarkersGetAndRelease(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	store, err := (&cli{db: s.db}).openStore(t.Context(), false)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	_, err = store.MarkerClaim(t.Context(), &twicestore.MarkerParams{Handler: "payment.charge.v1", Key: "order-7", Now: at, JobID: 12, Epoch: 3})
	_ = store.Close()
	if err != nil {
		t.Fatal(err)
	}

	r := s.ok("markers", "get", "payment.charge.v1", "order-7")
	if want := "handler payment.charge.v1 processed key order-7 at 2026-11-30T08:00:00Z, claimed by job 12 in lease epoch 3\n"; r.stdout != want {
		t.Errorf("markers get printed %q, want %q", r.stdout, want)
	}
	var m markerJSON
	if err := json.Unmarshal([]byte(s.ok("markers", "get", "payment.charge.v1", "order-7", "--json").stdout), &m); err != nil {
		t.Fatal(err)
	}
	if m.JobID != 12 || m.Epoch != 3 || !m.ProcessedAt.Equal(at) {
		t.Errorf("markers get --json = %+v", m)
	}

	wantError(t, s.run("markers", "release", "payment.charge.v2", "order-7"), ExitFailure, `"payment.charge.v2" has no marker for key "order-7"`, "markers get")
	wantError(t, s.run("markers", "release", "payment.charge.v1"), ExitUsage, "HANDLER KEY")
	s.ok("markers", "get", "payment.charge.v1", "order-7") // the typo released nothing

	s.ok("markers", "release", "payment.charge.v1", "order-7")
	wantError(t, s.run("markers", "get", "payment.charge.v1", "order-7"), ExitFailure, "has not processed", "KindOpts.HandlerName")
}
