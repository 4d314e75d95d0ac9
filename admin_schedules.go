package twice

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/twicejobs/twice/internal/freetext"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// ScheduleInfo is one recurring schedule as an operator sees it: its
// recorded state, and where it is still defined.
type ScheduleInfo struct {
	// Schedule is the schedule as the store records it; a schedule that
	// never ticked has only Name, Kind, Spec and NextAt.
	twicetype.Schedule
	// Recorded reports that the store has the schedule (it ticked at least
	// once since it was last removed).
	Recorded bool
	// Registered reports that this client's registry defines it.
	Registered bool
	// Published reports that a node published it in the kind catalog: some
	// worker's code defines it (or did, when that node last ran).
	Published bool
}

// ScheduleRemoveParams name the schedule to remove, who removes it and why.
type ScheduleRemoveParams struct {
	Name   string
	By     string
	Reason string
	// Force removes a schedule this client's registry still defines; its
	// scheduler would record it again at its next tick.
	Force bool
}

// ScheduleTriggerParams name the schedule to run now.
type ScheduleTriggerParams struct {
	Name string
	// RequestID identifies the trigger request: a retried call with the
	// same id enqueues no second job while the first one is unfinished.
	// Empty makes every call a new request.
	RequestID string
	By        string
	Reason    string
}

// ScheduleList lists every schedule the store records, this client
// registers or the catalog publishes, by name.
func (c *Client) ScheduleList(ctx context.Context) ([]ScheduleInfo, error) {
	res, err := c.store.ScheduleList(ctx, &twicestore.ScheduleListParams{})
	if err != nil {
		return nil, fmt.Errorf("twice: %w", err) // the store's error says "list schedules"
	}
	cat, err := c.store.CatalogList(ctx, &twicestore.CatalogListParams{})
	if err != nil {
		return nil, fmt.Errorf("twice: list schedules: read the kind catalog: %w", err)
	}
	byName := map[string]*ScheduleInfo{}
	for _, s := range res.Schedules {
		byName[s.Name] = &ScheduleInfo{Schedule: s, Recorded: true}
	}
	now := c.now()
	for _, s := range c.registry.scheduleList() {
		info := byName[s.name]
		if info == nil {
			info = &ScheduleInfo{Schedule: twicetype.Schedule{Name: s.name, Kind: s.kind, Spec: s.spec, NextAt: s.parsed.Next(now)}}
			byName[s.name] = info
		}
		info.Registered = true
	}
	for _, k := range cat.Kinds {
		for _, ks := range k.Schedules {
			info := byName[ks.Name]
			if info == nil {
				info = &ScheduleInfo{Schedule: twicetype.Schedule{Name: ks.Name, Kind: k.Kind, Spec: ks.Spec}}
				byName[ks.Name] = info
			}
			info.Published = true
		}
	}
	out := make([]ScheduleInfo, 0, len(byName))
	for _, s := range byName {
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b ScheduleInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// ScheduleRemove deletes a schedule's record and its ticks from the store:
// for a schedule removed from the code, which would otherwise be listed
// forever. A schedule this client still registers is refused unless
// p.Force is set, since its scheduler records it again at the next tick.
// A schedule the store does not record is refused (ErrUnknownSchedule).
func (c *Client) ScheduleRemove(ctx context.Context, p *ScheduleRemoveParams) error {
	return c.scheduleRemove(ctx, c.store, p)
}

// ScheduleRemoveTx is ScheduleRemove in the caller's transaction.
func (c *Client) ScheduleRemoveTx(ctx context.Context, tx any, p *ScheduleRemoveParams) error {
	exec, err := c.adminExec("remove schedule", tx)
	if err != nil {
		return err
	}
	return c.scheduleRemove(ctx, exec, p)
}

// ScheduleTrigger runs one tick of a schedule now, once cluster-wide: it
// enqueues the schedule's job with the schedule's args and options, under a
// unique key derived from p.RequestID, so a retried call does not enqueue
// it twice. The schedule's regular ticks are not touched. The args come
// from this client's registry, or else from the last job the schedule
// enqueued; a schedule known to neither is refused with what to do. The
// job is held like any other while its kind's switch is off.
func (c *Client) ScheduleTrigger(ctx context.Context, p *ScheduleTriggerParams) (*EnqueueResult, error) {
	return c.scheduleTrigger(ctx, c.store, p, true)
}

// ScheduleTriggerTx is ScheduleTrigger in the caller's transaction.
func (c *Client) ScheduleTriggerTx(ctx context.Context, tx any, p *ScheduleTriggerParams) (*EnqueueResult, error) {
	exec, err := c.adminExec("trigger schedule", tx)
	if err != nil {
		return nil, err
	}
	return c.scheduleTrigger(ctx, exec, p, false)
}

func (c *Client) scheduleRemove(ctx context.Context, exec twicestore.Executor, p *ScheduleRemoveParams) error {
	if p == nil || strings.TrimSpace(p.Name) == "" {
		return fmt.Errorf("twice: remove schedule: %w", invalidf("no schedule named"))
	}
	if err := checkFields(scheduleNameField(p.Name), byField(p.By), reasonField(p.Reason)); err != nil {
		return fmt.Errorf("twice: remove schedule: %w", err)
	}
	if !p.Force && c.registry.lookupSchedule(p.Name) != nil {
		return fmt.Errorf("twice: remove schedule %q: %w", p.Name,
			invalidf("this binary still registers it, so its scheduler records it again at the next tick: remove it from the code first (or force)"))
	}
	err := exec.ScheduleRemove(ctx, &twicestore.ScheduleRemoveParams{Name: p.Name})
	if errors.Is(err, twicestore.ErrNotFound) {
		return fmt.Errorf("twice: remove schedule %q: %w: the store records no schedule of that name (see ScheduleList)", p.Name, ErrUnknownSchedule)
	}
	if err != nil {
		return fmt.Errorf("twice: %w", err) // the store's error names the schedule
	}
	c.logAction(ctx, "schedule removed", byOr(p.By), p.Reason, "schedule", p.Name)
	return nil
}

// scheduleTrigger enqueues the tick's job on exec; notify wakes this
// client's fetch loop, which only makes sense once the job is committed.
func (c *Client) scheduleTrigger(ctx context.Context, exec twicestore.Executor, p *ScheduleTriggerParams, notify bool) (*EnqueueResult, error) {
	if p == nil || strings.TrimSpace(p.Name) == "" {
		return nil, fmt.Errorf("twice: trigger schedule: %w", invalidf("no schedule named"))
	}
	if err := checkFields(scheduleNameField(p.Name),
		freetext.Field{Name: "request id", Value: p.RequestID, Max: MaxNameBytes},
		byField(p.By), reasonField(p.Reason)); err != nil {
		return nil, fmt.Errorf("twice: trigger schedule: %w", err)
	}
	requestID := p.RequestID
	if requestID == "" {
		requestID = newMessageID()
	}
	var kind, key string
	var args []byte
	var opts EnqueueOpts
	if s := c.registry.lookupSchedule(p.Name); s != nil {
		kind, args, key = s.kind, s.args, s.key
		if s.opts.Enqueue != nil {
			opts = *s.opts.Enqueue
		}
	} else {
		last, err := c.lastScheduledJob(ctx, exec, p.Name)
		if err != nil {
			return nil, err
		}
		kind, args, key = last.Kind, last.Args, last.Key
		opts = EnqueueOpts{Queue: last.Queue, Priority: last.Priority, MaxAttempts: last.MaxAttempts}
		if key == last.MessageID {
			key = "" // the key was the message id: a new message gets its own
		}
	}
	opts.RunAt, opts.Delay, opts.MessageID = time.Time{}, 0, ""
	opts.UniqueKey = "trigger:" + p.Name + ":" + requestID
	params, err := c.insertParams(ctx, kind, args, key, &opts)
	if err != nil {
		return nil, fmt.Errorf("twice: trigger schedule %q: %w", p.Name, err)
	}
	res, err := c.insert(ctx, exec, []*twicestore.JobInsertParams{params}, notify)
	if err != nil {
		return nil, fmt.Errorf("twice: trigger schedule %q: %w", p.Name, err)
	}
	if !res[0].Duplicate {
		c.logAction(ctx, "schedule triggered", byOr(p.By), p.Reason, "schedule", p.Name, "kind", kind, "job_id", res[0].Job.ID)
	}
	return res[0], nil
}

// lastScheduledJob is the last job a schedule this client does not register
// enqueued: the only copy of its args this process can reach.
func (c *Client) lastScheduledJob(ctx context.Context, exec twicestore.Executor, name string) (*twicetype.JobRow, error) {
	res, err := exec.ScheduleList(ctx, &twicestore.ScheduleListParams{})
	if err != nil {
		return nil, fmt.Errorf("twice: trigger schedule %q: %w", name, err)
	}
	i := slices.IndexFunc(res.Schedules, func(s twicetype.Schedule) bool { return s.Name == name })
	if i < 0 {
		return nil, fmt.Errorf("twice: trigger schedule %q: %w: neither this binary's registry nor the store has it", name, ErrUnknownSchedule)
	}
	s := res.Schedules[i]
	var row *twicetype.JobRow
	if s.LastJobID != 0 {
		row, err = exec.JobGet(ctx, &twicestore.JobGetParams{ID: s.LastJobID})
		if err != nil && !errors.Is(err, twicestore.ErrNotFound) {
			return nil, fmt.Errorf("twice: trigger schedule %q: %w", name, err)
		}
	}
	if row == nil {
		return nil, fmt.Errorf("twice: trigger schedule %q: its args are unknown here: this binary does not register it "+
			"and its last job is gone; trigger it from a binary built with the registry that schedules it", name)
	}
	return row, nil
}

// scheduleNameField is a schedule's name as an admin call gives it. A
// trigger's unique key holds it with the request id, both within
// MaxNameBytes, so the key stays within MaxKeyBytes.
func scheduleNameField(name string) freetext.Field {
	return freetext.Field{Name: "schedule name", Value: name, Max: MaxNameBytes}
}

func (r *Registry) lookupSchedule(name string) *schedule {
	if r == nil {
		return nil
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.schedules[name]
}
