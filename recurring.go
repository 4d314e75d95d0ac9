package twice

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// MissedTicks is what a schedule does about ticks that passed while no
// scheduler ran (every node down, say).
type MissedTicks int

const (
	// SkipMissed forgets missed ticks: the next tick is the first one after
	// the scheduler starts again.
	SkipMissed MissedTicks = iota
	// RunOnceMissed enqueues one job for the latest missed tick when the
	// scheduler starts again, however many were missed.
	RunOnceMissed
)

// ScheduleOpts configure a recurring schedule. The zero value is valid.
type ScheduleOpts struct {
	// Missed is what happens to ticks missed during downtime. Defaults to
	// SkipMissed.
	Missed MissedTicks
	// Enqueue are the options of each tick's job (queue, priority, max
	// attempts). RunAt, Delay and UniqueKey are the scheduler's and are
	// ignored.
	Enqueue *EnqueueOpts
}

// schedule is a registered recurring job.
type schedule struct {
	name   string
	spec   string
	kind   string
	args   []byte
	key    string // the args' IdempotencyKey, if any
	opts   ScheduleOpts
	parsed cron.Schedule
}

var scheduleName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`)

// Schedule registers a recurring job: args are enqueued on every tick of
// spec, a standard 5-field cron spec ("0 3 * * *") or a descriptor
// ("@hourly", "@every 10m"). Every node running a worker runs the
// scheduler; each tick is recorded in the store with its job in one
// transaction, so one tick becomes one job however many nodes run. A tick
// while the kind's kill switch is off is recorded as skipped. The args'
// kind must be registered in r.
//
// A cron spec is read in the node's local time zone unless it starts with
// CRON_TZ=<IANA zone> ("CRON_TZ=Europe/Paris 0 3 * * *"); nodes in
// different zones would each fire their own ticks, so give every schedule
// CRON_TZ= when they may not share one. "@every D" ticks at multiples of D
// since the Unix epoch. A spec that does not parse, names an unknown zone,
// never fires ("0 0 30 2 *") or is an "@every" of less than a whole second
// is refused.
func (r *Registry) Schedule(name, spec string, args Args, opts *ScheduleOpts) error {
	if !scheduleName.MatchString(name) {
		return fmt.Errorf("schedule %q: name it with lower-case letters, digits, '.', '-' or '_'", name)
	}
	parsed, err := parseSchedule(spec, time.Now())
	if err != nil {
		return fmt.Errorf("schedule %q: %w", name, err)
	}
	if args == nil {
		return fmt.Errorf("schedule %q: args are nil", name)
	}
	kind := args.Kind()
	if r.lookup(kind) == nil {
		return fmt.Errorf("schedule %q: kind %q is not registered: register its handler before its schedule", name, kind)
	}
	b, err := encodeArgs(args, MaxArgsBytesDefault)
	if err != nil {
		return fmt.Errorf("schedule %q: %w", name, err)
	}
	s := &schedule{name: name, spec: spec, kind: kind, args: b, parsed: parsed}
	if k, ok := args.(IdempotencyKeyer); ok {
		s.key = k.IdempotencyKey()
	}
	if opts != nil {
		s.opts = *opts
	}
	if s.opts.Missed != SkipMissed && s.opts.Missed != RunOnceMissed {
		return fmt.Errorf("schedule %q: unknown Missed policy %d", name, s.opts.Missed)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.schedules == nil {
		r.schedules = map[string]*schedule{}
	}
	if _, dup := r.schedules[name]; dup {
		return fmt.Errorf("schedule %q is already registered", name)
	}
	r.schedules[name] = s
	return nil
}

// MustSchedule is Schedule that panics on error, for wiring at start-up.
func (r *Registry) MustSchedule(name, spec string, args Args, opts *ScheduleOpts) {
	if err := r.Schedule(name, spec, args, opts); err != nil {
		panic(err)
	}
}

func (r *Registry) scheduleList() []*schedule {
	if r == nil {
		return nil
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	list := make([]*schedule, 0, len(r.schedules))
	for _, s := range r.schedules {
		list = append(list, s)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].name < list[j].name })
	return list
}

// everySchedule is "@every D" aligned to multiples of D since the Unix
// epoch, so nodes started at different times agree on the tick times (cron's
// own @every counts from whenever it is asked).
type everySchedule struct{ every time.Duration }

func (e everySchedule) Next(t time.Time) time.Time {
	return t.Truncate(e.every).Add(e.every)
}

// specHint ends every bad-spec error: what a good spec looks like.
const specHint = `use 5 fields (minute hour day-of-month month day-of-week), like "0 3 * * *", ` +
	`or a descriptor like "@hourly" or "@every 10m", optionally after a time zone, as in "CRON_TZ=UTC 0 3 * * *"`

// parseSchedule parses spec into the schedule the scheduler runs, or
// explains why it cannot run it. now is when the spec must still fire
// after.
//
// The cron library panics on a time-zone prefix without a spec after it
// ("TZ=UTC", "CRON_TZ="), so the prefix is checked here first, and any
// other panic of the parser is turned into an error too. The library
// answers a zero time when a spec has no activation in the next five
// years (February 30th): the scheduler would spin on it, so such a spec is
// refused. "@every" is checked before the library rounds a sub-second or
// negative interval up to one second.
func parseSchedule(spec string, now time.Time) (sched cron.Schedule, err error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("bad spec %q: %s; %s", spec, fmt.Sprintf(format, a...), specHint)
	}
	rest := spec
	for _, prefix := range []string{"CRON_TZ=", "TZ="} {
		if !strings.HasPrefix(spec, prefix) {
			continue
		}
		zone, after, ok := strings.Cut(spec[len(prefix):], " ")
		if zone == "" {
			return nil, bad("%s names no time zone: write an IANA name such as %sUTC", prefix, prefix)
		}
		if _, err := time.LoadLocation(zone); err != nil {
			return nil, bad("unknown time zone %q: use an IANA name such as UTC or Europe/Paris", zone)
		}
		if !ok || strings.TrimSpace(after) == "" {
			return nil, bad("nothing follows the time zone: put the schedule after a space, as in %s%s 0 3 * * *", prefix, zone)
		}
		rest = strings.TrimSpace(after)
	}
	if d, ok := strings.CutPrefix(rest, "@every "); ok {
		every, err := time.ParseDuration(strings.TrimSpace(d))
		if err != nil {
			return nil, bad("%q is not a duration", strings.TrimSpace(d))
		}
		if every < time.Second || every%time.Second != 0 {
			return nil, bad("the interval %v is not a whole number of seconds of at least 1s", every)
		}
		return everySchedule{every: every}, nil
	}
	defer func() {
		if v := recover(); v != nil {
			sched, err = nil, bad("the cron parser failed on it (%v)", v)
		}
	}()
	parsed, err := cron.ParseStandard(spec)
	if err != nil {
		return nil, bad("%v", err)
	}
	if _, ok := parsed.(cron.ConstantDelaySchedule); ok {
		return nil, bad("write @every followed by one space and the interval")
	}
	if parsed.Next(now).IsZero() {
		return nil, bad("it never fires (no such date in the next five years)")
	}
	return parsed, nil
}

// maxCatchUp bounds the walk to the latest missed tick.
const maxCatchUp = 1_000_000
