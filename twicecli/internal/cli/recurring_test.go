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
	if r := s.ok("recurring", "ls"); !strings.Contains(r.stdout, "no schedules") {
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
	_ = store.Close()

	r := s.ok("recurring", "ls")
	for _, want := range []string{"nightly-watermarks", "0 3 * * *", "enqueued", "credit-sweep", "skipped"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("recurring ls lacks %q:\n%s", want, r.stdout)
		}
	}
	out := s.ok("recurring", "ls", "--json").stdout
	var list []scheduleJSON
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list) != 2 {
		t.Fatalf("recurring ls --json: %v, %d schedules", err, len(list))
	}
	if list[0].Name != "credit-sweep" || list[1].LastJobID == 0 || !list[1].Recorded || list[1].Registered {
		t.Errorf("--json = %+v", list)
	}
	for _, key := range []string{`"last_tick_at"`, `"last_outcome"`, `"last_job_id"`, `"next_at"`} {
		if !strings.Contains(out, key) {
			t.Errorf("recurring ls --json lacks the snake_case key %s:\n%s", key, out)
		}
	}
	if strings.Contains(out, "LastTickAt") {
		t.Errorf("recurring ls --json uses Go field names:\n%s", out)
	}
	if !strings.Contains(r.stdout, "removed from the code") {
		t.Errorf("recurring ls does not say the schedules are defined nowhere:\n%s", r.stdout)
	}

	// trigger runs a tick now from the last job's args, once per request.
	r = s.ok("recurring", "trigger", "nightly-watermarks", "--request-id", "r1")
	if !strings.Contains(r.stdout, "triggered nightly-watermarks: enqueued job") {
		t.Errorf("trigger: %q", r.stdout)
	}
	if r := s.ok("recurring", "trigger", "nightly-watermarks", "--request-id", "r1"); !strings.HasPrefix(r.stdout, "already triggered") {
		t.Errorf("second trigger of one request: %q", r.stdout)
	}
	// A schedule that never enqueued has no args to trigger with.
	wantError(t, s.run("recurring", "trigger", "credit-sweep"), ExitFailure, "its args are unknown here")
	wantError(t, s.run("recurring", "trigger", "no-such"), ExitUsage, "unknown schedule")

	// rm removes a schedule the code dropped; an unknown one is refused.
	before := s.ok("recurring", "ls", "--json").stdout
	wantError(t, s.run("recurring", "rm", "credit-swep"), ExitUsage, "unknown schedule")
	if after := s.ok("recurring", "ls", "--json").stdout; after != before {
		t.Errorf("a refused rm changed the schedules")
	}
	s.ok("recurring", "rm", "credit-sweep", "--reason", "sweep retired")
	if r := s.ok("recurring", "ls"); strings.Contains(r.stdout, "credit-sweep") {
		t.Errorf("rm left the schedule:\n%s", r.stdout)
	}
	if r := s.run("recurring"); r.code != ExitUsage {
		t.Errorf("bare 'recurring': exit %d, want %d", r.code, ExitUsage)
	}
}
