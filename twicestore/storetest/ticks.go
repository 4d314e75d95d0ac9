package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

func (e *env) ticks(name string, limit int) []twicetype.ScheduleTick {
	e.t.Helper()
	res, err := e.s.ScheduleTicks(e.ctx, &twicestore.ScheduleTicksParams{Name: name, Limit: limit})
	if err != nil {
		e.t.Fatalf("ScheduleTicks(%s): %v", name, err)
	}
	return res.Ticks
}

// tickString renders a tick for comparison: its time, outcome and job.
func tickString(t twicetype.ScheduleTick) string {
	return fmt.Sprintf("%s %s %d", t.TickAt.UTC().Format(time.RFC3339Nano), t.Outcome, t.JobID)
}

func testScheduleTickHistory(t *testing.T, e *env) {
	first := e.tickFires(e.s, e.tickParams("history", e.at(0)))
	e.tickFires(e.s, e.skippedParams("history", e.at(time.Minute)))
	e.tickHeld(e.s, e.tickParams("history", e.at(time.Minute))) // lost to another scheduler: not recorded
	third := e.tickFires(e.s, e.tickParams("history", e.at(2*time.Minute)))
	e.tickFires(e.s, e.tickParams("other", e.at(0)))

	var got []string
	for _, tk := range e.ticks("history", 0) {
		if tk.Name != "history" || tk.RecordedAt.IsZero() {
			t.Errorf("tick %+v: want name history and a recorded time", tk)
		}
		got = append(got, tickString(tk))
	}
	want := []string{
		tickString(twicetype.ScheduleTick{TickAt: e.at(2 * time.Minute), Outcome: twicetype.ScheduleEnqueued, JobID: third.Job.ID}),
		tickString(twicetype.ScheduleTick{TickAt: e.at(time.Minute), Outcome: twicetype.ScheduleSkipped}),
		tickString(twicetype.ScheduleTick{TickAt: e.at(0), Outcome: twicetype.ScheduleEnqueued, JobID: first.Job.ID}),
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("ScheduleTicks = %q, want %q", got, want)
	}
	if n := len(e.ticks("history", 2)); n != 2 {
		t.Errorf("ScheduleTicks with Limit 2 listed %d", n)
	}
	if n := len(e.ticks("never-ticked", 0)); n != 0 {
		t.Errorf("ScheduleTicks of an unknown schedule listed %d", n)
	}
}

func testScheduleTickHistoryBounded(t *testing.T, e *env) {
	n := twicestore.ScheduleTicksKept + 5
	for i := range n {
		e.tickFires(e.s, e.skippedParams("bounded", e.at(time.Duration(i)*time.Minute)))
	}
	ticks := e.ticks("bounded", 0)
	if len(ticks) != twicestore.ScheduleTicksKept {
		t.Fatalf("%d ticks kept, want %d", len(ticks), twicestore.ScheduleTicksKept)
	}
	if newest, oldest := ticks[0].TickAt, ticks[len(ticks)-1].TickAt; !newest.Equal(e.at(time.Duration(n-1)*time.Minute)) ||
		!oldest.Equal(e.at(time.Duration(n-twicestore.ScheduleTicksKept)*time.Minute)) {
		t.Errorf("kept ticks from %s to %s, want the newest %d", oldest, newest, twicestore.ScheduleTicksKept)
	}
}
