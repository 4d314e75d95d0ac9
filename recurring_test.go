package twice_test

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

func noop[T twice.Args]() twice.HandlerFunc[T] {
	return func(context.Context, *twice.Job[T]) error { return nil }
}

func TestScheduleRegistrationErrors(t *testing.T) {
	t.Parallel()
	reg := twice.NewRegistry()
	twice.MustRegister(reg, noop[pingArgs](), nil)
	tests := []struct {
		name, spec string
		args       twice.Args
		want       string
	}{
		{"nightly", "61 * * * *", pingArgs{}, `schedule "nightly": bad spec "61 * * * *"`},
		{"nightly", "every hour", pingArgs{}, "use 5 fields"},
		{"Nightly Report", "@hourly", pingArgs{}, "name it with lower-case letters"},
		{"credits", "@hourly", creditArgs{}, `kind "balance.credit.v1" is not registered`},
	}
	for _, tt := range tests {
		if err := reg.Schedule(tt.name, tt.spec, tt.args, nil); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Schedule(%q, %q) = %v, want an error containing %q", tt.name, tt.spec, err, tt.want)
		}
	}
	if err := reg.Schedule("hourly-ping", "@hourly", pingArgs{}, nil); err != nil {
		t.Fatal(err)
	}
	if err := reg.Schedule("hourly-ping", "@hourly", pingArgs{}, nil); err == nil {
		t.Error("a schedule registered twice was accepted")
	}
}

// TestScheduleSpecs: every spec the scheduler cannot run is refused at
// registration with an error saying why, instead of panicking (a time zone
// without a spec), spinning (a date that never comes) or firing every
// second (a non-positive or sub-second @every).
func TestScheduleSpecs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		spec string
		want string // "" when the spec is accepted
	}{
		{"0 3 * * *", ""},
		{"@hourly", ""},
		{"@every 1s", ""},
		{"@every 10m", ""},
		{"@every 1h30m", ""},
		{"0 0 29 2 *", ""}, // leap days: rare, but they come
		{"CRON_TZ=UTC 0 3 * * *", ""},
		{"CRON_TZ=Europe/Paris 30 2 * * 1-5", ""},
		{"TZ=America/New_York 0 9 * * *", ""},
		{"CRON_TZ=UTC @every 5m", ""},
		{"CRON_TZ=UTC  @daily", ""},

		{"0 0 30 2 *", "never fires"},
		{"0 0 31 4 *", "never fires"},
		{"0 0 31 2,4,6,9,11 *", "never fires"},
		{"CRON_TZ=UTC 0 0 30 2 *", "never fires"},
		{"TZ=UTC", "nothing follows the time zone"},
		{"CRON_TZ=UTC", "nothing follows the time zone"},
		{"CRON_TZ=UTC ", "nothing follows the time zone"},
		{"TZ=", "names no time zone"},
		{"CRON_TZ=", "names no time zone"},
		{"TZ= 0 3 * * *", "names no time zone"},
		{"CRON_TZ=Mars/Olympus 0 3 * * *", `unknown time zone "Mars/Olympus"`},
		{"@every -5m", "not a whole number of seconds of at least 1s"},
		{"@every 0s", "not a whole number of seconds of at least 1s"},
		{"@every 1ns", "not a whole number of seconds of at least 1s"},
		{"@every 999ms", "not a whole number of seconds of at least 1s"},
		{"@every 1500ms", "not a whole number of seconds of at least 1s"},
		{"CRON_TZ=UTC @every 0s", "not a whole number of seconds of at least 1s"},
		{"@every soon", `"soon" is not a duration`},
		{"61 * * * *", "end of range (61) above maximum (59)"},
		{"", "empty spec"},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			t.Parallel()
			reg := twice.NewRegistry()
			twice.MustRegister(reg, noop[pingArgs](), nil)
			err := reg.Schedule("s", tt.spec, pingArgs{}, nil)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Schedule(%q) = %v, want it accepted", tt.spec, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Schedule(%q) accepted it, want an error containing %q", tt.spec, tt.want)
			}
			for _, w := range []string{`schedule "s": bad spec ` + strconv.Quote(tt.spec), tt.want, "use 5 fields"} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Schedule(%q) = %q, want it to contain %q", tt.spec, err, w)
				}
			}
		})
	}
}

func listSchedules(t *testing.T, store twicestore.Store) map[string]twicetype.Schedule {
	t.Helper()
	res, err := store.ScheduleList(context.Background(), &twicestore.ScheduleListParams{})
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]twicetype.Schedule{}
	for _, s := range res.Schedules {
		m[s.Name] = s
	}
	return m
}

func waitSchedule(t *testing.T, store twicestore.Store, name string, cond func(twicetype.Schedule) bool) twicetype.Schedule {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		s, ok := listSchedules(t, store)[name]
		if ok && cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("schedule %q never reached the expected state; last: %+v", name, s)
		}
		<-tick.C
	}
}

// TestThreeSchedulersOneJobPerTick: three workers, each with its own pool on
// one database, run the same schedule; every tick becomes exactly one job.
func TestThreeSchedulersOneJobPerTick(t *testing.T) {
	t.Parallel()
	path := migratedPath(t)
	store := openStore(t, path)
	start := time.Now()
	for range 3 {
		reg := twice.NewRegistry()
		twice.MustRegister(reg, noop[pingArgs](), &twice.KindOpts{Strategy: twice.None})
		reg.MustSchedule("every-second", "@every 1s", pingArgs{N: 7}, nil)
		startClient(t, openStore(t, path), testConfig(reg))
	}
	waitSchedule(t, store, "every-second", func(s twicetype.Schedule) bool {
		return s.LastTickAt.Sub(start) >= 3*time.Second
	})
	res, err := store.JobList(context.Background(), &twicestore.JobListParams{
		Filter: twicestore.JobFilter{Kind: pingArgs{}.Kind()}, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	perTick := map[string]int{}
	for _, j := range res.Jobs {
		perTick[j.UniqueKey]++
	}
	if len(perTick) < 3 {
		t.Fatalf("%d ticks enqueued, want at least 3", len(perTick))
	}
	for key, n := range perTick {
		if !strings.HasPrefix(key, "recurring:every-second:") || n != 1 {
			t.Errorf("tick %q: %d jobs, want exactly 1", key, n)
		}
	}
}

func TestDisabledKindTickIsRecordedAsSkipped(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	store := newStore(t)
	reg := twice.NewRegistry()
	twice.MustRegister(reg, noop[creditArgs](), &twice.KindOpts{Strategy: twice.None, FailClosed: true})
	reg.MustSchedule("credit-sweep", "@every 1s", creditArgs{CreditID: 1, Cents: 1}, nil)
	cfg := testConfig(reg)
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	startClient(t, store, cfg)
	s := waitSchedule(t, store, "credit-sweep", func(s twicetype.Schedule) bool { return !s.LastTickAt.IsZero() })
	if s.LastOutcome != twicetype.ScheduleSkipped || s.LastJobID != 0 {
		t.Errorf("tick of a switched-off kind: outcome %q, job %d; want skipped and no job", s.LastOutcome, s.LastJobID)
	}
	if n := countJobs(t, store); n != 0 {
		t.Errorf("%d jobs enqueued for a switched-off kind", n)
	}
	if !strings.Contains(logs.String(), "recurring tick skipped") {
		t.Errorf("no log line for the skipped tick:\n%s", logs.String())
	}
}

func TestMissedTicksPolicy(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		policy   twice.MissedTicks
		wantJobs int
	}{{twice.SkipMissed, 0}, {twice.RunOnceMissed, 1}} {
		store := newStore(t)
		// A yearly schedule whose last recorded tick is three years old:
		// it missed two or three ticks, and the next is months away, so
		// nothing but the policy can enqueue during the test.
		year := time.Now().UTC().Year()
		const spec = "0 0 1 1 *"
		if _, err := store.ScheduleTick(context.Background(), &twicestore.ScheduleTickParams{
			Name: "new-year", Kind: pingArgs{}.Kind(), Spec: spec, TickAt: time.Date(year-3, 1, 1, 0, 0, 0, 0, time.UTC),
			Outcome: twicetype.ScheduleSkipped}); err != nil {
			t.Fatal(err)
		}
		reg := twice.NewRegistry()
		twice.MustRegister(reg, noop[pingArgs](), &twice.KindOpts{Strategy: twice.None})
		reg.MustSchedule("new-year", spec, pingArgs{}, &twice.ScheduleOpts{Missed: tt.policy})
		var logs syncBuffer
		cfg := testConfig(reg)
		cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		startClient(t, store, cfg)
		if tt.wantJobs == 1 {
			s := waitSchedule(t, store, "new-year", func(s twicetype.Schedule) bool { return s.LastJobID != 0 })
			if want := time.Date(year, 1, 1, 0, 0, 0, 0, time.UTC); !s.LastTickAt.Equal(want) {
				t.Errorf("run-once tick at %s, want the latest missed tick %s", s.LastTickAt, want)
			}
		} else {
			// Once the scheduler says it skipped, it has had its chance to
			// misbehave.
			deadline := time.Now().Add(10 * time.Second)
			tick := time.NewTicker(10 * time.Millisecond)
			for !strings.Contains(logs.String(), "skipping missed ticks") {
				if time.Now().After(deadline) {
					t.Fatalf("the scheduler never reported the missed ticks:\n%s", logs.String())
				}
				<-tick.C
			}
			tick.Stop()
		}
		if n := countJobs(t, store); n != tt.wantJobs {
			t.Errorf("policy %d: %d jobs at start, want %d", tt.policy, n, tt.wantJobs)
		}
	}
}

// nightlyReportArgs are the args of ExampleRegistry_Schedule's job.
type nightlyReportArgs struct{}

func (nightlyReportArgs) Kind() string { return "report.nightly.v1" }

// A schedule's spec is read in the node's local time zone unless it names
// one with CRON_TZ=; a spec the scheduler could never run is refused when
// it is registered.
func ExampleRegistry_Schedule() {
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[nightlyReportArgs](func(context.Context, *twice.Job[nightlyReportArgs]) error {
		return nil
	}), nil)

	// 03:00 UTC every day, whatever the nodes' local time zone.
	if err := reg.Schedule("nightly-report", "CRON_TZ=UTC 0 3 * * *", nightlyReportArgs{}, nil); err != nil {
		fmt.Println(err)
	}
	// February 30th never comes.
	if err := reg.Schedule("leap-report", "0 0 30 2 *", nightlyReportArgs{}, nil); err != nil {
		fmt.Println(err)
	}
	// Output:
	// schedule "leap-report": bad spec "0 0 30 2 *": it never fires (no such date in the next five years); use 5 fields (minute hour day-of-month month day-of-week), like "0 3 * * *", or a descriptor like "@hourly" or "@every 10m", optionally after a time zone, as in "CRON_TZ=UTC 0 3 * * *"
}
