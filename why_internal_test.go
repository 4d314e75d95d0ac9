package twice

import (
	"testing"
	"time"

	"github.com/twicejobs/twice/internal/toggles"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// TestWaitBookReason covers what the database test of JobWaitReasons
// cannot set up at will: the order of the reasons, a switch that expires,
// the toggles file, a stranded queue, a timer, a per-key limit that holds
// back only some of a kind's due jobs.
func TestWaitBookReason(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 15, 0, 0, 0, time.UTC)
	live := CatalogKind{KindInfo: twicetype.KindInfo{Kind: "a.b.v1"}, Live: true}
	served := QueueInfo{QueueInfo: twicetype.QueueInfo{Name: "default"}, Nodes: []string{"n1"}}
	book := func(edit func(b *waitBook)) *waitBook {
		b := &waitBook{now: now, kinds: map[string]CatalogKind{"a.b.v1": live},
			queues: map[string]QueueInfo{"default": served}, limits: map[string]LimitUsage{}}
		if edit != nil {
			edit(b)
		}
		return b
	}
	due := &twicetype.JobRow{Kind: "a.b.v1", Queue: "default", State: twicetype.JobStateAvailable, RunAt: now.Add(-time.Second), MaxAttempts: 5}
	later := *due
	later.RunAt = now.Add(time.Hour)
	retry := later
	retry.Attempt = 2
	timer := &twicetype.JobRow{Kind: "a.b.v1", Queue: "default", State: twicetype.JobStateWaiting, WaitName: "cool-off", RunAt: now.Add(time.Minute)}
	offUntil := twicetype.Toggle{Kind: "a.b.v1", By: "ops", At: now.Add(-time.Hour), ExpiresAt: now.Add(time.Hour), Reason: "incident 7"}
	pause := QueueInfo{QueueInfo: twicetype.QueueInfo{Name: "default", Paused: true, PausedAt: now.Add(-time.Minute), Until: now.Add(time.Minute)}, Nodes: []string{"n1"}}
	perKey := LimitUsage{Kind: "a.b.v1", Limit: twicestore.KindLimit{PerKey: 1}, Running: 1, Due: 3, Throttled: 1}
	for _, tc := range []struct {
		name  string
		b     *waitBook
		job   *twicetype.JobRow
		code  WaitCode
		text  string
		until time.Time
	}{
		{"due", book(nil), due, WaitDue, "due: a worker starts it at its next fetch", time.Time{}},
		{"scheduled", book(nil), &later, WaitScheduled, "scheduled: due at 2026-01-02T16:00:00Z", later.RunAt},
		{"retry", book(nil), &retry, WaitScheduled, "scheduled: retry 2 of 4 at 2026-01-02T16:00:00Z", later.RunAt},
		{"timer", book(nil), timer, WaitParked, `parked: waiting for signal "cool-off" or its timer at 2026-01-02T15:01:00Z`, timer.RunAt},
		{"held until expiry, before scheduled", book(func(b *waitBook) { b.switches = toggles.NewSet(nil, []twicetype.Toggle{offUntil}) }), &later, WaitHeld,
			`held: its kill switch is off in the store by ops since 2026-01-02T14:00:00Z: "incident 7", until 2026-01-02T16:00:00Z`, offUntil.ExpiresAt},
		{"held by the file", book(func(b *waitBook) { b.switches = toggles.NewSet(map[string]bool{"a.b.v1": false}, nil) }), due, WaitHeld,
			"held: its kill switch is off in the toggles file", time.Time{}},
		{"a file's on lifts fail-closed", book(func(b *waitBook) {
			b.switches = toggles.NewSet(map[string]bool{"a.b.v1": true}, nil)
			k := b.kinds["a.b.v1"]
			k.FailClosed = true
			b.kinds["a.b.v1"] = k
		}), due, WaitDue, "due: a worker starts it at its next fetch", time.Time{}},
		{"paused until", book(func(b *waitBook) { b.queues["default"] = pause }), due, WaitPaused,
			"paused: its queue is paused since 2026-01-02T14:59:00Z, until 2026-01-02T15:01:00Z", pause.Until},
		{"a parked job is parked, even paused", book(func(b *waitBook) { b.queues["default"] = pause }), timer, WaitParked,
			`parked: waiting for signal "cool-off" or its timer at 2026-01-02T15:01:00Z`, timer.RunAt},
		{"kind in no catalog", book(func(b *waitBook) { delete(b.kinds, "a.b.v1") }), due, WaitOrphaned,
			"orphaned: no live worker registers its kind; it waits for one (it is never failed or dropped for it)", time.Time{}},
		{"stranded queue", book(func(b *waitBook) { b.queues["default"] = QueueInfo{} }), &later, WaitOrphaned,
			"orphaned: no live worker works its queue; it waits for one that lists the queue in its Config.Queues", time.Time{}},
		{"per-key limit holds back some", book(func(b *waitBook) { b.limits["a.b.v1"] = perKey }), due, WaitDue,
			"due: a worker starts it at its next fetch, unless its concurrency key's slot is taken (its kind's limits: per key 1; 1 running, 1 of 3 due jobs held back)", time.Time{}},
		{"a rate used up", book(func(b *waitBook) {
			b.limits["a.b.v1"] = LimitUsage{Kind: "a.b.v1", Limit: twicestore.KindLimit{Rate: RateLimit{Limit: 10, Period: time.Minute}}, Due: 2, Throttled: 2, RateUsed: 10}
		}), due, WaitThrottled, "throttled: its kind's limits (rate 10/1m) are used up: 0 running, 2 of 2 due jobs held back, 10 of 10 starts used in the last 1m", time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := tc.b.reason(tc.job)
			if r.Code != tc.code || r.Text != tc.text || !r.Until.Equal(tc.until) {
				t.Errorf("reason = %s %q until %v\nwant     %s %q until %v", r.Code, r.Text, r.Until, tc.code, tc.text, tc.until)
			}
		})
	}
}
