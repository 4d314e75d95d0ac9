package cli

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/twicejobs/twice/twicesqlite"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

func TestRecurringLs(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	if r := s.ok("recurring", "ls"); !strings.Contains(r.stdout, "no schedule has ticked yet") {
		t.Errorf("empty list: %q", r.stdout)
	}
	store, err := twicesqlite.Open(t.Context(), s.db)
	if err != nil {
		t.Fatal(err)
	}
	tick := time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC)
	for _, p := range []*twicestore.ScheduleTickParams{
		{Name: "nightly-watermarks", Kind: "ads.image-watermark.v1", Spec: "0 3 * * *", TickAt: tick, NextAt: tick.Add(24 * time.Hour),
			Outcome: twicetype.ScheduleEnqueued, Job: &twicestore.JobInsertParams{Kind: "ads.image-watermark.v1", Queue: "bulk",
				Args: []byte(`{"image_id":1}`), MessageID: "m", Key: "k", MaxAttempts: 3}},
		{Name: "credit-sweep", Kind: "balance.credit.v1", Spec: "@every 1h", TickAt: tick, NextAt: tick.Add(time.Hour),
			Outcome: twicetype.ScheduleSkipped},
	} {
		if _, err := store.ScheduleTick(t.Context(), p); err != nil {
			t.Fatal(err)
		}
	}
	store.Close()

	r := s.ok("recurring", "ls")
	for _, want := range []string{"nightly-watermarks", "0 3 * * *", "enqueued", "credit-sweep", "skipped"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("recurring ls lacks %q:\n%s", want, r.stdout)
		}
	}
	var list []twicetype.Schedule
	if err := json.Unmarshal([]byte(s.ok("recurring", "ls", "--json").stdout), &list); err != nil || len(list) != 2 {
		t.Fatalf("recurring ls --json: %v, %d schedules", err, len(list))
	}
	if list[0].Name != "credit-sweep" || list[1].LastJobID == 0 {
		t.Errorf("--json = %+v", list)
	}
	if r := s.run("recurring"); r.code != ExitUsage {
		t.Errorf("bare 'recurring': exit %d, want %d", r.code, ExitUsage)
	}
}
