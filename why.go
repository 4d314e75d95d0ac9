package twice

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/twicejobs/twice/internal/toggles"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// Why a job is not running: a job that is neither running nor finished
// waits for something, and an operator asking "why isn't my job running?"
// gets one answer per job, derived from what the store holds now (the
// kill switches, the queues' pauses, the kind catalog, the limits' usage)
// rather than stored with the job.

// WaitCode names why a job waits, in a few stable words that scripts can
// match on.
type WaitCode string

// The reasons a job that is neither running nor finished waits, in the
// order JobWaitReasons looks for them.
const (
	// WaitParked: its handler parked it (twice.AwaitSignal, twice.Sleep)
	// until a signal of its wait's name or the wait's timer.
	WaitParked WaitCode = "parked"
	// WaitHeld: its kind's kill switch is off in the store, or the kind is
	// fail-closed and no stored switch turns it on.
	WaitHeld WaitCode = "held"
	// WaitPaused: its queue is paused.
	WaitPaused WaitCode = "paused"
	// WaitOrphaned: no live worker registers its kind, or none works its
	// queue. The job is never failed or dropped for it: it waits for one.
	WaitOrphaned WaitCode = "orphaned"
	// WaitScheduled: it is due later: a delay, a snooze, or a retry's
	// backoff.
	WaitScheduled WaitCode = "scheduled"
	// WaitThrottled: it is due, but its kind's limits are used up: it
	// starts once a slot or the rate window frees.
	WaitThrottled WaitCode = "throttled"
	// WaitDue: nothing holds it: a worker starts it at its next fetch.
	WaitDue WaitCode = "due"
	// WaitDependencies: a workflow task whose dependencies have not all
	// completed; it has no job yet (see WorkflowInfo.TaskWaitReason).
	WaitDependencies WaitCode = "dependencies"
)

// WaitReason says why one job (or workflow task) is not running. Only
// the fields its Code uses are set; its JSON form is what the CLI's and
// the dashboard API's "waiting_because" carry.
type WaitReason struct {
	Code WaitCode `json:"code"`
	// Text says it in one line for people, beginning with the code, e.g.
	// `held: its kill switch is off in the store by ops@host since
	// 2026-01-02T15:04:05Z: "smtp down"`. It names neither the job's kind
	// nor its queue, which are shown beside it.
	Text string `json:"text"`
	// Until is when the wait ends by itself, when known: a scheduled
	// job's run time, a parked job's timer, the end of a queue's pause or
	// the expiry of a kill switch. Zero when only an operator, a worker
	// or a signal ends it.
	Until time.Time `json:"until,omitzero"`
	// Since is when the switch was set (held) or the queue paused
	// (paused).
	Since time.Time `json:"since,omitzero"`
	// By and Reason are who held the kind or paused the queue, and why.
	By     string `json:"by,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Source says what holds a held job: WaitSourceStore, WaitSourceFile
	// or WaitSourceFailClosed.
	Source string `json:"source,omitempty"`
	// Signal is the name of the wait a parked job waits on.
	Signal string `json:"signal,omitempty"`
	// Retry is, for a job scheduled for a retry, which retry it waits
	// for (1 for the first) and Retries how many its MaxAttempts allow.
	Retry   int `json:"retry,omitempty"`
	Retries int `json:"retries,omitempty"`
	// Limit is the usage of a throttled job's kind.
	Limit *WaitLimit `json:"limit,omitempty"`
	// Dependencies lists the tasks a workflow task waits for.
	Dependencies []string `json:"dependencies,omitempty"`
}

// What holds a held job (WaitReason.Source).
const (
	// WaitSourceStore: a kill switch stored from the CLI, the dashboard or
	// the admin API turns the kind off.
	WaitSourceStore = "store"
	// WaitSourceFile: the client's toggles file (Config.TogglesFile)
	// turns the kind off.
	WaitSourceFile = "file"
	// WaitSourceFailClosed: the kind is fail-closed (KindOpts.FailClosed,
	// as the catalog publishes it) and no stored switch turns it on.
	WaitSourceFailClosed = "fail-closed"
)

// WaitLimit is the usage of a throttled job's kind when its reason was
// read.
type WaitLimit struct {
	// Limits puts the kind's limits in words (twicestore.KindLimit.Phrases).
	Limits []string `json:"limits"`
	// Running counts the kind's running jobs, Due its due ones, and
	// Throttled those of them its limits hold back.
	Running   int `json:"running"`
	Due       int `json:"due"`
	Throttled int `json:"throttled"`
	// Usage is LimitList's report of the kind, in full.
	Usage LimitUsage `json:"-"`
}

// JobWaitReasons says, for each of jobs, why it is not running: one
// reason per job, in the order of jobs, nil for a job that is running or
// finished. Whatever the number of jobs it reads the store a fixed number
// of times (the kill switches, the queues, the catalog, the limits), and
// none when no job needs a reason; pass it a page of JobList.
//
// A job gets the first reason that holds, in this order: parked, held,
// paused, orphaned, scheduled, throttled, due. Kill switches are read from
// the store and from this client's Config.TogglesFile, if any: a switch
// in another toggles file, which only its workers read, is not seen, so a
// fail-closed kind that such a file turns on still reads held (its text
// says so), and a kind such a file turns off reads as not held. A kind whose per-key limit holds back only some of
// its due jobs gives its due jobs WaitDue, with a text that says a key's
// slot may hold this one back: the store reports per kind, not per job.
func (c *Client) JobWaitReasons(ctx context.Context, jobs []*twicetype.JobRow) ([]*WaitReason, error) {
	out := make([]*WaitReason, len(jobs))
	if !slices.ContainsFunc(jobs, waits) {
		return out, nil
	}
	b, err := c.loadWaitBook(ctx)
	if err != nil {
		return nil, fmt.Errorf("twice: why jobs wait: %w", err)
	}
	for i, j := range jobs {
		if waits(j) {
			out[i] = b.reason(j)
		}
	}
	return out, nil
}

// waits reports whether j is neither running nor finished: whether it has
// a reason to give.
func waits(j *twicetype.JobRow) bool {
	return j.State == twicetype.JobStateAvailable || j.State == twicetype.JobStateWaiting
}

// WaitCount is how many due jobs of one kind and queue wait for one
// reason.
type WaitCount struct {
	Kind  string
	Queue string
	// Code is WaitHeld, WaitPaused, WaitOrphaned, WaitThrottled or
	// WaitDue: a due job is neither parked nor scheduled.
	Code  WaitCode
	Count int
}

// JobWaitCounts counts the due jobs that are not running, by kind, queue
// and reason: held, paused, orphaned, throttled, or merely due (a worker
// starts them at its next fetch). It reads counts, never job rows: the
// due jobs by kind and queue, and what JobWaitReasons reads, once. A
// kind's throttled jobs (LimitList's Throttled, a count per kind) are
// given to its queues in name order. Scheduled and parked jobs are not
// due and not counted.
func (c *Client) JobWaitCounts(ctx context.Context) ([]WaitCount, error) {
	b, err := c.loadWaitBook(ctx)
	if err != nil {
		return nil, fmt.Errorf("twice: count why jobs wait: %w", err)
	}
	res, err := c.store.JobCount(ctx, &twicestore.JobCountParams{Filter: twicestore.JobFilter{
		State: twicetype.JobStateAvailable, Timing: twicestore.JobDue, Now: b.now}})
	if err != nil {
		return nil, fmt.Errorf("twice: count why jobs wait: %w", err)
	}
	counts := slices.Clone(res.Counts)
	slices.SortFunc(counts, func(a, b twicestore.JobCount) int {
		return cmp.Or(strings.Compare(a.Kind, b.Kind), strings.Compare(a.Queue, b.Queue))
	})
	throttled := map[string]int{}
	for k, u := range b.limits {
		throttled[k] = u.Throttled
	}
	var out []WaitCount
	add := func(n twicestore.JobCount, code WaitCode, count int) {
		if count > 0 {
			out = append(out, WaitCount{Kind: n.Kind, Queue: n.Queue, Code: code, Count: count})
		}
	}
	for _, n := range counts {
		if r := b.blocked(n.Kind, n.Queue); r != nil {
			add(n, r.Code, n.Count)
			continue
		}
		t := min(throttled[n.Kind], n.Count)
		throttled[n.Kind] -= t
		add(n, WaitThrottled, t)
		add(n, WaitDue, n.Count-t)
	}
	return out, nil
}

// waitBook is what the reasons are read from, read once for a page of
// jobs.
type waitBook struct {
	now      time.Time
	switches toggles.Set
	kinds    map[string]CatalogKind
	queues   map[string]QueueInfo
	limits   map[string]LimitUsage
}

func (c *Client) loadWaitBook(ctx context.Context) (*waitBook, error) {
	b := &waitBook{now: c.now(), kinds: map[string]CatalogKind{}, queues: map[string]QueueInfo{}, limits: map[string]LimitUsage{}}
	switches, err := c.store.ToggleList(ctx, &twicestore.ToggleListParams{Now: b.now})
	if err != nil {
		return nil, fmt.Errorf("list kill switches: %w", err)
	}
	var file map[string]bool
	if c.cfg.TogglesFile != "" {
		// A file that does not parse is the worker's to report, loudly;
		// the reasons then follow the store alone, as the worker does.
		file, _ = toggles.LoadFile(c.cfg.TogglesFile)
	}
	b.switches = toggles.NewSet(file, switches.Toggles)
	kinds, err := c.Catalog(ctx)
	if err != nil {
		return nil, err
	}
	for _, k := range kinds {
		b.kinds[k.Kind] = k
	}
	queues, err := c.queueList(ctx, c.store, b.now)
	if err != nil {
		return nil, err
	}
	for _, q := range queues {
		b.queues[q.Name] = q
	}
	if c.worker.working() {
		// This client works its queues even before its first heartbeat
		// lists it among the live nodes.
		for _, name := range c.queueNames() {
			q := b.queues[name]
			q.Name, q.Nodes = name, append(q.Nodes, c.cfg.NodeID)
			b.queues[name] = q
		}
	}
	usage, err := c.LimitList(ctx)
	if err != nil {
		return nil, err
	}
	for _, u := range usage {
		b.limits[u.Kind] = u
	}
	return b, nil
}

// reason is why j, which is neither running nor finished, waits.
func (b *waitBook) reason(j *twicetype.JobRow) *WaitReason {
	if j.State == twicetype.JobStateWaiting {
		return parkedReason(j)
	}
	if r := b.blocked(j.Kind, j.Queue); r != nil {
		return r
	}
	if j.RunAt.After(b.now) {
		return scheduledReason(j)
	}
	return b.dueReason(j.Kind)
}

// blocked is what holds every job of kind in queue whatever its run
// time — its kill switch, its queue's pause, the lack of a worker — or
// nil.
func (b *waitBook) blocked(kind, queue string) *WaitReason {
	k, known := b.kinds[kind]
	if d := b.switches.Decide(kind, k.FailClosed); !d.Enabled {
		return heldReason(d)
	}
	q := b.queues[queue]
	if q.Paused {
		r := &WaitReason{Code: WaitPaused, Since: q.PausedAt.UTC(), Until: q.Until.UTC(), By: q.By, Reason: q.Reason}
		r.Text = "paused: its queue is paused" + byText(q.By, q.PausedAt, q.Reason) + untilText(q.Until)
		return r
	}
	switch {
	case !known || !k.Live:
		return &WaitReason{Code: WaitOrphaned,
			Text: "orphaned: no live worker registers its kind; it waits for one (it is never failed or dropped for it)"}
	case len(q.Nodes) == 0:
		return &WaitReason{Code: WaitOrphaned,
			Text: "orphaned: no live worker works its queue; it waits for one that lists the queue in its Config.Queues"}
	}
	return nil
}

func heldReason(d toggles.Decision) *WaitReason {
	if d.DecidedBy == toggles.SourceStore {
		t := d.Store
		r := &WaitReason{Code: WaitHeld, Source: WaitSourceStore, Since: t.At.UTC(), Until: t.ExpiresAt.UTC(), By: t.By, Reason: t.Reason}
		r.Text = "held: its kill switch is off in the store" + byText(t.By, t.At, t.Reason) + untilText(t.ExpiresAt)
		return r
	}
	if d.DecidedBy == toggles.SourceFile {
		return &WaitReason{Code: WaitHeld, Source: WaitSourceFile, Text: "held: its kill switch is off in the toggles file"}
	}
	return &WaitReason{Code: WaitHeld, Source: WaitSourceFailClosed,
		Text: "held: its kind is fail-closed and no stored kill switch turns it on (unless a worker's toggles file does)"}
}

func parkedReason(j *twicetype.JobRow) *WaitReason {
	r := &WaitReason{Code: WaitParked, Signal: j.WaitName}
	r.Text = fmt.Sprintf("parked: waiting for signal %q", j.WaitName)
	if j.RunAt.Before(twicestore.WaitNever) {
		r.Until = j.RunAt.UTC()
		r.Text += " or its timer at " + timeText(j.RunAt)
	} else {
		r.Text += " (no timeout)"
	}
	return r
}

func scheduledReason(j *twicetype.JobRow) *WaitReason {
	r := &WaitReason{Code: WaitScheduled, Until: j.RunAt.UTC()}
	if j.Attempt > 0 {
		r.Retry, r.Retries = j.Attempt, max(j.MaxAttempts-1, j.Attempt)
		r.Text = fmt.Sprintf("scheduled: retry %d of %d at %s", r.Retry, r.Retries, timeText(j.RunAt))
		return r
	}
	r.Text = "scheduled: due at " + timeText(j.RunAt)
	return r
}

// dueReason is why a due job of kind that nothing blocks waits: its
// kind's limits, or nothing.
func (b *waitBook) dueReason(kind string) *WaitReason {
	u, limited := b.limits[kind]
	if !limited || u.Throttled == 0 {
		return &WaitReason{Code: WaitDue, Text: "due: a worker starts it at its next fetch"}
	}
	usage := fmt.Sprintf("%d running, %d of %d due jobs held back", u.Running, u.Throttled, u.Due)
	if r := u.Limit.Rate; !r.IsZero() {
		usage += fmt.Sprintf(", %d of %d starts used in the last %s", u.RateUsed, r.Limit, r.PeriodText())
	}
	limits := strings.Join(u.Limit.Phrases(), ", ")
	if u.Throttled < u.Due {
		return &WaitReason{Code: WaitDue, Text: fmt.Sprintf(
			"due: a worker starts it at its next fetch, unless its concurrency key's slot is taken (its kind's limits: %s; %s)", limits, usage)}
	}
	return &WaitReason{Code: WaitThrottled,
		Text:  fmt.Sprintf("throttled: its kind's limits (%s) are used up: %s", limits, usage),
		Limit: &WaitLimit{Limits: u.Limit.Phrases(), Running: u.Running, Due: u.Due, Throttled: u.Throttled, Usage: u}}
}

// byText is " by BY since T: "REASON"", each part when known.
func byText(by string, since time.Time, reason string) string {
	var s string
	if by != "" {
		s += " by " + by
	}
	if !since.IsZero() {
		s += " since " + timeText(since)
	}
	if reason != "" {
		s += fmt.Sprintf(": %q", reason)
	}
	return s
}

func untilText(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return ", until " + timeText(t)
}

// timeText is a time as the reasons' texts give it: UTC, to the second.
func timeText(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05Z") }

// TaskWaitReason says why the workflow's task name has no job yet: the
// dependencies it waits for, those not completed. It is nil for a task
// with a job (JobWaitReasons says why that job waits), a cancelled task
// and an unknown name.
func (w *WorkflowInfo) TaskWaitReason(name string) *WaitReason {
	t := w.Task(name)
	if t == nil || t.Job != nil || t.State != twicetype.WorkflowTaskWaiting {
		return nil
	}
	var deps []string
	for _, d := range t.Deps {
		if dt := w.Task(d); dt == nil || dt.Job == nil || dt.Job.State != twicetype.JobStateCompleted {
			deps = append(deps, d)
		}
	}
	return &WaitReason{Code: WaitDependencies, Dependencies: deps,
		Text: "dependencies: waiting for " + strings.Join(deps, ", ") + " to complete"}
}

// working reports whether the worker is started and not stopping.
func (w *worker) working() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.started && !w.stopping
}

// WorkflowWaitReasons says why each of the workflow's tasks waits, by task
// name: a task with no job yet waits for its dependencies (TaskWaitReason),
// one with a job as its job does (JobWaitReasons, one read of the store
// for all of them). A task that runs, finished or was cancelled has none.
func (c *Client) WorkflowWaitReasons(ctx context.Context, w *WorkflowInfo) (map[string]*WaitReason, error) {
	var jobs []*twicetype.JobRow
	for _, t := range w.Tasks {
		if t.Job != nil {
			jobs = append(jobs, t.Job)
		}
	}
	reasons, err := c.JobWaitReasons(ctx, jobs)
	if err != nil {
		return nil, err
	}
	out := map[string]*WaitReason{}
	for _, t := range w.Tasks {
		r := w.TaskWaitReason(t.Name)
		if t.Job != nil {
			r, reasons = reasons[0], reasons[1:]
		}
		if r != nil {
			out[t.Name] = r
		}
	}
	return out, nil
}
