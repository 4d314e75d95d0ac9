package twice

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/twicejobs/twice/internal/logattr"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// scheduler fires the registry's recurring schedules on this node. Every
// node fires every tick; the store lets one of them win (ScheduleTick), so
// a tick enqueues its job once however many nodes run. On start it catches
// up on ticks missed while no scheduler ran, as each schedule's Missed
// option says.
type scheduler struct {
	// c is the handle: a tick's job is checked and resolved as an Enqueue
	// would (insertParams) and observed as enqueued.
	c *Client
	// enabled reports whether a kind's kill switch lets it run: a tick of
	// a kind switched off is recorded as skipped.
	enabled func(kind string) bool
	// wake wakes the fetch loop: a tick's job is due now.
	wake   func()
	logger *slog.Logger
}

func newScheduler(c *Client, enabled func(string) bool, wake func()) *scheduler {
	return &scheduler{c: c, enabled: enabled, wake: wake, logger: c.logger.With(logattr.Component, "scheduler")}
}

// run fires the schedules until ctx is done.
func (r *scheduler) run(ctx context.Context) {
	c := r.c
	schedules := c.registry.scheduleList()
	if len(schedules) == 0 {
		return
	}
	logger := r.logger
	last := map[string]time.Time{}
	for {
		res, err := c.store.ScheduleList(ctx, &twicestore.ScheduleListParams{})
		if err == nil {
			for _, st := range res.Schedules {
				last[st.Name] = st.LastTickAt
			}
			break
		}
		logger.WarnContext(ctx, "reading schedules failed; retrying", logattr.Err, err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(c.cfg.PollInterval):
		}
	}
	now := time.Now()
	next := make(map[string]time.Time, len(schedules))
	for _, s := range schedules {
		lt, seen := last[s.name]
		if !seen {
			next[s.name] = s.parsed.Next(now)
			continue
		}
		n := s.parsed.Next(lt)
		if n.After(now) || n.IsZero() { // zero: dropped by the loop below
			next[s.name] = n
			continue
		}
		// Ticks were missed while no scheduler ran.
		latest := n
		for i := 0; i < maxCatchUp; i++ {
			after := s.parsed.Next(latest)
			if after.After(now) || after.IsZero() {
				break
			}
			latest = after
		}
		if s.opts.Missed == RunOnceMissed {
			logger.InfoContext(ctx, "running one missed tick", "schedule", s.name, "tick", latest)
			r.fireTick(ctx, s, latest)
		} else {
			logger.InfoContext(ctx, "skipping missed ticks", "schedule", s.name, "last_tick", lt, "latest_missed", latest)
		}
		next[s.name] = s.parsed.Next(now)
	}
	for {
		// A schedule with no next tick (the parser's answer when none
		// falls in the next five years) is dropped, not fired at the zero
		// time over and over: Schedule refuses such specs, this keeps the
		// loop from spinning if one gets through.
		for _, s := range schedules {
			if t, ok := next[s.name]; ok && t.IsZero() {
				logger.ErrorContext(ctx, "recurring schedule has no next tick; it will not run until the process restarts",
					"schedule", s.name, "spec", s.spec)
				delete(next, s.name)
			}
		}
		if len(next) == 0 {
			return
		}
		soonest := time.Time{}
		for _, t := range next {
			if soonest.IsZero() || t.Before(soonest) {
				soonest = t
			}
		}
		timer := time.NewTimer(time.Until(soonest))
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
		now := time.Now()
		for _, s := range schedules {
			tick, ok := next[s.name]
			if !ok || tick.After(now) {
				continue
			}
			r.fireTick(ctx, s, tick)
			next[s.name] = s.parsed.Next(tick)
			if !next[s.name].After(now) { // behind (a long pause): no backlog
				next[s.name] = s.parsed.Next(now)
			}
		}
	}
}

// fireTick records one tick, enqueuing its job unless the kind is switched
// off. Every node fires every tick; the store lets one of them win.
func (r *scheduler) fireTick(ctx context.Context, s *schedule, tick time.Time) {
	c, logger := r.c, r.logger
	p := &twicestore.ScheduleTickParams{
		Name: s.name, Kind: s.kind, Spec: s.spec, TickAt: tick, NextAt: s.parsed.Next(tick),
		Outcome: twicetype.ScheduleSkipped, Now: c.now(),
	}
	end := func([]*twicetype.JobRow, error) {}
	if r.enabled(s.kind) {
		ctx, end = c.traceEnqueue(ctx, traceOpSchedule, 1)
		var opts EnqueueOpts
		if s.opts.Enqueue != nil {
			opts = *s.opts.Enqueue
		}
		opts.RunAt, opts.Delay = time.Time{}, 0
		opts.UniqueKey = fmt.Sprintf("recurring:%s:%d", s.name, tick.Unix())
		job, err := c.insertParams(ctx, s.kind, s.args, s.key, &opts)
		if err != nil {
			end(nil, err)
			logger.WarnContext(ctx, "recurring tick not enqueued", "schedule", s.name, logattr.Err, err)
			return
		}
		p.Outcome, p.Job = twicetype.ScheduleEnqueued, job
	}
	res, err := c.store.ScheduleTick(ctx, p)
	if err == nil && res.Fired && res.Job != nil {
		end([]*twicetype.JobRow{res.Job}, nil)
	} else {
		end(nil, err) // an error, or another node's tick
	}
	if err != nil {
		if ctx.Err() == nil {
			logger.WarnContext(ctx, "recording a recurring tick failed", "schedule", s.name, "tick", tick, logattr.Err, err)
		}
		return
	}
	if !res.Fired {
		return // another node recorded this tick
	}
	if p.Job == nil {
		logger.WarnContext(ctx, "recurring tick skipped: the kind is switched off", "schedule", s.name, logattr.Kind, s.kind, "tick", tick)
		c.observeSkippedTick(s.kind, s.opts.Enqueue)
		return
	}
	logger.InfoContext(ctx, "recurring tick enqueued", "schedule", s.name, logattr.Kind, s.kind, "tick", tick, logattr.JobID, res.Job.ID)
	c.observe(EventEnqueued, res.Job)
	r.wake()
}
