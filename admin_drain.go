package twice

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// Retiring a kind version (x.y.v1 once x.y.v2 runs) is safe only when
// nothing can still hand a worker a v1 job: no job of it waits, runs or
// can be retried, no schedule enqueues it, no workflow will release a task
// of it, and no live worker still registers it (that worker's code, or its
// clients' Enqueue calls, may make more). KindDrain gathers all of that in
// one report with one verdict, so a deploy script can wait for it instead
// of guessing.

// KindDrainSample is how many job, workflow and node names a
// KindDrainReport's verdict cites per thing that holds the kind: enough to
// start looking, short enough for one line of a deploy log.
const KindDrainSample = 3

// kindDrainScanMax bounds how many scheduled jobs KindDrain reads to tell
// retries from first runs, and how many open workflows it reads for tasks
// of the kind: the verdict never depends on the split, and a drain check
// must stay cheap for a kind with a million jobs waiting.
const kindDrainScanMax = 10_000

// KindDrainReport is what still holds one kind version: the jobs that may
// yet run its handler, the schedules and workflows that will make more,
// and the live workers that register it. Safe is true only when every
// count is zero and no schedule or worker is listed.
//
// Jobs that finished as completed, discarded or cancelled do not hold a
// kind: nothing runs them again unless an operator retries one by hand.
// Dead jobs do hold it: they are kept to be retried, and a retry needs the
// handler. Discard or delete them to release the kind.
//
// Tasks not yet enqueued and callbacks not yet inserted hold the kind
// too: KindDrain reads the running workflows and the unfinished batches
// (up to 10,000 of each) for a task of the kind still waiting for its
// dependencies, or a callback of the kind still to come. A finished
// OnSuccess batch that failed got no callback; retrying its dead jobs may
// still bring it, and those dead jobs hold their own kinds.
type KindDrainReport struct {
	// Kind is the kind version the report is about, lower-cased.
	Kind string `json:"kind"`
	// Waiting counts the available jobs due now: a worker would fetch them.
	Waiting int `json:"waiting"`
	// Scheduled counts the available jobs due later that have not run yet
	// (delayed at enqueue).
	Scheduled int `json:"scheduled"`
	// Retrying counts the available jobs due later that ran before: a
	// retry's backoff or a snooze.
	Retrying int `json:"retrying"`
	// Running counts the jobs a worker holds now.
	Running int `json:"running"`
	// Parked counts the jobs in state waiting: parked by a durable wait
	// until a signal or their timer.
	Parked int `json:"parked"`
	// Dead counts the jobs that used up their attempts and wait for an
	// operator to retry or discard them.
	Dead int `json:"dead"`
	// WorkflowTasks counts the tasks of the kind in running workflows
	// whose job does not exist yet: they wait for a dependency, and their
	// job is inserted when it completes.
	WorkflowTasks int `json:"workflow_tasks"`
	// Workflows are the running workflows with a task of the kind not yet
	// enqueued, by id.
	Workflows []int64 `json:"workflows,omitempty"`
	// BatchCallbacks counts the unfinished batches (open, or sealed with
	// jobs pending) whose callback is of the kind: it is inserted when
	// their last job finishes.
	BatchCallbacks int `json:"batch_callbacks"`
	// Batches are those batches, by id.
	Batches []int64 `json:"batches,omitempty"`
	// JobIDs holds, per state name (waiting, scheduled, retrying, running,
	// parked, dead), the ids of the first few jobs of that class, ascending.
	JobIDs map[string][]int64 `json:"job_ids,omitempty"`
	// Schedules are the recurring schedules of the kind that still
	// enqueue it: defined in this client's registry or published in the
	// catalog by a worker. A schedule only the store records (its code is
	// gone) is listed in StaleSchedules and does not hold the kind.
	Schedules []string `json:"schedules,omitempty"`
	// StaleSchedules are the schedules of the kind that the store records
	// but no code defines any more: remove them with ScheduleRemove.
	StaleSchedules []string `json:"stale_schedules,omitempty"`
	// Workers are the live nodes (a heartbeat within the liveness window)
	// that register the kind, by id.
	Workers []string `json:"workers,omitempty"`
	// Safe is the verdict: nothing holds the kind, so its handler can be
	// removed from the code.
	Safe bool `json:"safe"`
	// Reason says the verdict in one line: "safe to remove", or "not safe:
	// " and what holds the kind, with the first few job ids or names.
	Reason string `json:"reason"`
	// At is when the report was read.
	At time.Time `json:"at"`
}

// KindDrain reports what still holds one kind version, for retiring it:
// its jobs waiting, scheduled, retrying, running, parked or dead, its tasks
// in running workflows, the schedules that enqueue it and the live workers
// that register it, with one verdict (Safe, Reason). Call it after a
// deploy stopped enqueuing the kind; when it says safe, remove the kind's
// handler. A kind no catalog, registry, live worker or job knows is
// refused with an error wrapping ErrUnknownKind (usage class), naming the
// closest known kind.
func (c *Client) KindDrain(ctx context.Context, kind string) (*KindDrainReport, error) {
	if strings.TrimSpace(kind) == "" {
		return nil, fmt.Errorf("twice: kind drain: %w", invalidf("no kind named: give a kind version such as email.welcome.v1"))
	}
	if err := checkFields(kindField(kind)); err != nil {
		return nil, fmt.Errorf("twice: kind drain: %w", err)
	}
	kind = strings.ToLower(strings.TrimSpace(kind))
	now := c.now()
	r := &KindDrainReport{Kind: kind, JobIDs: map[string][]int64{}, At: now}

	counts, err := c.store.JobCount(ctx, &twicestore.JobCountParams{Filter: twicestore.JobFilter{Kind: kind, Now: now}})
	if err != nil {
		return nil, fmt.Errorf("twice: kind drain of %q: %w", kind, err)
	}
	total := 0
	for _, n := range counts.Counts {
		total += n.Count
		switch n.State {
		case twicetype.JobStateRunning:
			r.Running += n.Count
		case twicetype.JobStateWaiting:
			r.Parked += n.Count
		case twicetype.JobStateDead:
			r.Dead += n.Count
		}
	}
	known, err := c.allKnownKinds(ctx, c.store)
	if err != nil {
		return nil, fmt.Errorf("twice: kind drain of %q: %w", kind, err)
	}
	if err := c.drainWorkflows(ctx, r); err != nil {
		return nil, fmt.Errorf("twice: kind drain of %q: %w", kind, err)
	}
	if err := c.drainBatches(ctx, r); err != nil {
		return nil, fmt.Errorf("twice: kind drain of %q: %w", kind, err)
	}
	// A kind only a workflow task not yet enqueued or a batch callback not
	// yet inserted names is known too: the store holds it, so it is no typo.
	if total == 0 && r.WorkflowTasks == 0 && r.BatchCallbacks == 0 && !slices.Contains(known, kind) {
		// Only on this error path: the kinds that have jobs are candidates
		// for "did you mean" too (a retired kind has jobs and nothing else).
		all, err := c.store.JobCount(ctx, &twicestore.JobCountParams{Filter: twicestore.JobFilter{Now: now}})
		if err != nil {
			return nil, fmt.Errorf("twice: kind drain of %q: %w", kind, err)
		}
		for _, n := range all.Counts {
			known = append(known, n.Kind)
		}
		slices.Sort(known)
		return nil, fmt.Errorf("twice: kind drain: %w", unknownKindError(kind, slices.Compact(known)))
	}

	if err := c.drainJobs(ctx, r, now); err != nil {
		return nil, fmt.Errorf("twice: kind drain of %q: %w", kind, err)
	}
	schedules, err := c.ScheduleList(ctx)
	if err != nil {
		return nil, fmt.Errorf("twice: kind drain of %q: %w", kind, err)
	}
	for _, s := range schedules {
		switch {
		case !strings.EqualFold(s.Kind, kind):
		case s.Registered || s.Published:
			r.Schedules = append(r.Schedules, s.Name)
		default:
			r.StaleSchedules = append(r.StaleSchedules, s.Name)
		}
	}
	nodes, err := c.store.NodeList(ctx, &twicestore.NodeListParams{AliveSince: now.Add(-nodeAliveWindow)})
	if err != nil {
		return nil, fmt.Errorf("twice: kind drain of %q: %w", kind, err) // the store's error says "list nodes"
	}
	for _, n := range nodes {
		if containsFold(n.Kinds, kind) {
			r.Workers = append(r.Workers, n.ID)
		}
	}
	slices.Sort(r.Workers)
	r.Safe, r.Reason = r.verdict()
	return r, nil
}

// drainJobs counts the available jobs of r.Kind (due, scheduled,
// retrying) and samples the ids of every class that holds the kind.
func (c *Client) drainJobs(ctx context.Context, r *KindDrainReport, now time.Time) error {
	sample := func(name string, f twicestore.JobFilter) error {
		f.Kind, f.Now = r.Kind, now
		res, err := c.store.JobList(ctx, &twicestore.JobListParams{Filter: f, Limit: KindDrainSample})
		if err != nil {
			return err
		}
		for _, j := range res.Jobs {
			r.JobIDs[name] = append(r.JobIDs[name], j.ID)
		}
		slices.Sort(r.JobIDs[name])
		return nil
	}
	due, err := c.store.JobCount(ctx, &twicestore.JobCountParams{Filter: twicestore.JobFilter{
		Kind: r.Kind, State: twicetype.JobStateAvailable, Timing: twicestore.JobDue, Now: now}})
	if err != nil {
		return err
	}
	for _, n := range due.Counts {
		r.Waiting += n.Count
	}
	// The store tells due from later but not a first run from a retry: a
	// job's Attempt counts the attempts started, so a later job with none
	// was delayed at enqueue and one with some waits out a backoff or a
	// snooze. Read the later jobs, newest first, to split them.
	var before int64
	read := 0
	for read < kindDrainScanMax {
		res, err := c.store.JobList(ctx, &twicestore.JobListParams{Filter: twicestore.JobFilter{
			Kind: r.Kind, State: twicetype.JobStateAvailable, Timing: twicestore.JobScheduled, Now: now},
			BeforeID: before, Limit: min(JobListLimitMax, kindDrainScanMax-read)})
		if err != nil {
			return err
		}
		for _, j := range res.Jobs {
			name := "scheduled"
			if j.Attempt > 0 {
				name = "retrying"
				r.Retrying++
			} else {
				r.Scheduled++
			}
			if len(r.JobIDs[name]) < KindDrainSample {
				r.JobIDs[name] = append(r.JobIDs[name], j.ID)
			}
			before = j.ID
		}
		read += len(res.Jobs)
		if len(res.Jobs) == 0 || before == 0 {
			break
		}
	}
	if read >= kindDrainScanMax {
		// More wait than were read: count the rest as scheduled; the
		// verdict is "not safe" either way.
		later, err := c.store.JobCount(ctx, &twicestore.JobCountParams{Filter: twicestore.JobFilter{
			Kind: r.Kind, State: twicetype.JobStateAvailable, Timing: twicestore.JobScheduled, Now: now}})
		if err != nil {
			return err
		}
		n := 0
		for _, cnt := range later.Counts {
			n += cnt.Count
		}
		r.Scheduled += max(0, n-read)
	}
	slices.Sort(r.JobIDs["scheduled"])
	slices.Sort(r.JobIDs["retrying"])
	classes := []struct {
		name  string
		n     int
		state twicetype.JobState
		t     twicestore.JobTiming
	}{
		{"waiting", r.Waiting, twicetype.JobStateAvailable, twicestore.JobDue},
		{"running", r.Running, twicetype.JobStateRunning, ""},
		{"parked", r.Parked, twicetype.JobStateWaiting, ""},
		{"dead", r.Dead, twicetype.JobStateDead, ""},
	}
	for _, cl := range classes {
		if cl.n == 0 {
			continue
		}
		if err := sample(cl.name, twicestore.JobFilter{State: cl.state, Timing: cl.t}); err != nil {
			return err
		}
	}
	return nil
}

// drainWorkflows finds the tasks of r.Kind in running workflows whose job
// is not inserted yet: the job does not exist, so no job count shows it,
// but the workflow will insert it.
func (c *Client) drainWorkflows(ctx context.Context, r *KindDrainReport) error {
	var before int64
	read := 0
	for read < kindDrainScanMax {
		page, err := c.store.WorkflowList(ctx, &twicestore.WorkflowListParams{
			State: twicetype.WorkflowRunning, Before: before, Limit: twicestore.WorkflowListLimitDefault})
		if err != nil {
			return err
		}
		for _, w := range page.Workflows {
			before = w.ID
			got, err := c.store.WorkflowGet(ctx, &twicestore.WorkflowGetParams{ID: w.ID})
			if errors.Is(err, twicestore.ErrNotFound) {
				continue // finished and pruned since the listing: it holds nothing
			}
			if err != nil {
				return err
			}
			holds := false
			for _, t := range got.Tasks {
				if strings.EqualFold(t.Kind, r.Kind) && t.State == twicetype.WorkflowTaskWaiting {
					r.WorkflowTasks++
					holds = true
				}
			}
			if holds {
				r.Workflows = append(r.Workflows, w.ID)
			}
		}
		read += len(page.Workflows)
		if len(page.Workflows) < twicestore.WorkflowListLimitDefault {
			break
		}
	}
	slices.Sort(r.Workflows)
	return nil
}

// drainBatches finds the unfinished batches whose callback is of r.Kind:
// the callback job does not exist yet, but the batch will insert it.
func (c *Client) drainBatches(ctx context.Context, r *KindDrainReport) error {
	var before int64
	for read := 0; read < kindDrainScanMax; {
		page, err := c.store.BatchList(ctx, &twicestore.BatchListParams{
			Unfinished: true, Before: before, Limit: twicestore.WorkflowListLimitDefault})
		if err != nil {
			return err
		}
		for _, b := range page.Batches {
			before = b.ID
			if b.CallbackJobID == 0 && strings.EqualFold(b.CallbackKind, r.Kind) {
				r.BatchCallbacks++
				r.Batches = append(r.Batches, b.ID)
			}
		}
		read += len(page.Batches)
		if len(page.Batches) < twicestore.WorkflowListLimitDefault {
			break
		}
	}
	slices.Sort(r.Batches)
	return nil
}

// verdict says whether anything holds the kind, and what.
func (r *KindDrainReport) verdict() (bool, string) {
	var held []string
	jobs := func(n int, name string) {
		if n == 0 {
			return
		}
		ids := r.JobIDs[name]
		word := "job"
		if len(ids) > 1 {
			word = "jobs"
		}
		s := fmt.Sprintf("%d %s (%s %s", n, name, word, strings.Join(drainIDs(ids), ", "))
		if n > len(ids) {
			s += ", …"
		}
		held = append(held, s+")")
	}
	jobs(r.Waiting, "waiting")
	jobs(r.Scheduled, "scheduled")
	jobs(r.Retrying, "retrying")
	jobs(r.Running, "running")
	jobs(r.Parked, "parked")
	jobs(r.Dead, "dead")
	if r.WorkflowTasks > 0 {
		held = append(held, fmt.Sprintf("%d %s in open workflows (%s %s)", r.WorkflowTasks,
			drainPlural(r.WorkflowTasks, "task", "tasks"), drainPlural(len(r.Workflows), "workflow", "workflows"),
			drainSample(drainIDs(r.Workflows))))
	}
	if r.BatchCallbacks > 0 {
		held = append(held, fmt.Sprintf("%d %s of unfinished batches (%s %s)", r.BatchCallbacks,
			drainPlural(r.BatchCallbacks, "callback", "callbacks"), drainPlural(len(r.Batches), "batch", "batches"),
			drainSample(drainIDs(r.Batches))))
	}
	if n := len(r.Schedules); n > 0 {
		held = append(held, fmt.Sprintf("%d %s %s it (%s)", n, drainPlural(n, "schedule", "schedules"),
			drainPlural(n, "enqueues", "enqueue"), drainSample(r.Schedules)))
	}
	if n := len(r.Workers); n > 0 {
		held = append(held, fmt.Sprintf("%d %s %s it (%s)", n, drainPlural(n, "worker", "workers"),
			drainPlural(n, "registers", "register"), drainSample(r.Workers)))
	}
	if len(held) == 0 {
		return true, "safe to remove"
	}
	return false, "not safe: " + strings.Join(held, ", ")
}

func drainPlural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func drainIDs(ids []int64) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = fmt.Sprint(id)
	}
	return out
}

// drainSample joins the first KindDrainSample names, with "…" for more.
func drainSample(names []string) string {
	if len(names) <= KindDrainSample {
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:KindDrainSample], ", ") + ", …"
}
