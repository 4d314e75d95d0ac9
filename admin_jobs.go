package twice

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/twicejobs/twice/internal/freetext"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// JobTiming tells due jobs from scheduled ones in a JobFilter.
type JobTiming = twicestore.JobTiming

// The timings a JobFilter can ask for.
const (
	// JobDue matches available jobs whose run time has passed: those a
	// worker would fetch now.
	JobDue = twicestore.JobDue
	// JobScheduled matches available jobs due later (delays, retry
	// backoffs, snoozes).
	JobScheduled = twicestore.JobScheduled
)

// JobFilter selects jobs for JobList and the bulk actions. Zero fields
// match anything.
type JobFilter struct {
	State twicetype.JobState
	Kind  string
	Queue string
	// Node matches the node that holds the lease of a running job, or last
	// held it for a job in another state.
	Node string
	// Timing keeps available jobs due now (JobDue) or later
	// (JobScheduled); with it, State may only be empty or available.
	Timing JobTiming
	// CorrelationID matches the jobs enqueued with this correlation id
	// (EnqueueOpts.CorrelationID, or the one the context carried).
	CorrelationID string
	// Metadata matches the jobs whose metadata holds every one of these
	// pairs (and maybe others). At most 16 pairs; keys and values of at
	// most MaxKeyBytes, and a key may not be empty.
	Metadata map[string]string
}

// maxMetadataPairs bounds JobFilter.Metadata: a search names a few pairs.
const maxMetadataPairs = 16

func (f *JobFilter) validate() error {
	if err := checkFields(
		freetext.Field{Name: "kind filter", Value: f.Kind, Max: MaxKindBytes},
		freetext.Field{Name: "queue filter", Value: f.Queue, Max: MaxQueueBytes},
		freetext.Field{Name: "node filter", Value: f.Node, Max: MaxNameBytes},
		freetext.Field{Name: "correlation id filter", Value: f.CorrelationID, Max: MaxKeyBytes},
	); err != nil {
		return err
	}
	if err := checkMetadataFilter(f.Metadata); err != nil {
		return err
	}
	if f.State != "" && !f.State.Valid() {
		return invalidf("job state %q is not one of %v", f.State, twicetype.AllJobStates)
	}
	switch f.Timing {
	case "", JobDue, JobScheduled:
	default:
		return invalidf("job timing %q is not %q or %q", f.Timing, JobDue, JobScheduled)
	}
	if f.Timing != "" && f.State != "" && f.State != twicetype.JobStateAvailable {
		return invalidf("timing %q applies to available jobs only, not to state %q", f.Timing, f.State)
	}
	return nil
}

func (f *JobFilter) store(ids []int64, now time.Time) twicestore.JobFilter {
	return twicestore.JobFilter{IDs: ids, State: f.State, Kind: f.Kind, Queue: f.Queue,
		Node: f.Node, Timing: f.Timing, Now: now, CorrelationID: f.CorrelationID, Metadata: f.Metadata}
}

// checkMetadataFilter refuses metadata pairs no search should send: too
// many, an empty key, text a store cannot hold.
func checkMetadataFilter(md map[string]string) error {
	if len(md) > maxMetadataPairs {
		return invalidf("metadata filter has %d pairs, over the limit of %d: name fewer", len(md), maxMetadataPairs)
	}
	for _, k := range slices.Sorted(maps.Keys(md)) {
		if k == "" {
			return invalidf("metadata filter has a pair with no key: give key=value")
		}
		if err := checkFields(
			freetext.Field{Name: "metadata filter key", Value: k, Max: MaxKeyBytes},
			freetext.Field{Name: fmt.Sprintf("metadata filter %q", k), Value: md[k], Max: MaxKeyBytes},
		); err != nil {
			return err
		}
	}
	return nil
}

// Page sizes of JobList.
const (
	// JobListLimitDefault is the page size when JobListParams.Limit is 0.
	JobListLimitDefault = 100
	// JobListLimitMax is the largest page JobList returns.
	JobListLimitMax = 1000
)

// JobListParams filter and page a job listing.
type JobListParams struct {
	JobFilter
	// BeforeID continues a listing: pass the previous page's Next.
	BeforeID int64
	// Limit is the page size. Defaults to JobListLimitDefault; at most
	// JobListLimitMax.
	Limit int
}

// JobListResult is one page of jobs, newest first.
type JobListResult struct {
	Jobs []*twicetype.JobRow
	// Next is the BeforeID of the next page; 0 when this page is the last.
	Next int64
}

// JobGet returns one job, or an error wrapping ErrJobNotFound.
func (c *Client) JobGet(ctx context.Context, id int64) (*twicetype.JobRow, error) {
	row, err := c.store.JobGet(ctx, &twicestore.JobGetParams{ID: id})
	if errors.Is(err, twicestore.ErrNotFound) {
		return nil, fmt.Errorf("twice: job %d: %w: check the id (finished jobs are deleted after their retention)", id, ErrJobNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("twice: %w", err) // the store's error names the job
	}
	return row, nil
}

// JobList lists jobs matching a filter, newest first, one page at a time:
// pass a page's Next as the following call's BeforeID.
func (c *Client) JobList(ctx context.Context, p *JobListParams) (*JobListResult, error) {
	if p == nil {
		p = &JobListParams{}
	}
	if err := p.validate(); err != nil {
		return nil, fmt.Errorf("twice: list jobs: %w", err)
	}
	switch {
	case p.Limit < 0:
		return nil, fmt.Errorf("twice: list jobs: %w", invalidf("limit %d is negative: give 0 for %d", p.Limit, JobListLimitDefault))
	case p.BeforeID < 0:
		return nil, fmt.Errorf("twice: list jobs: %w", invalidf("before id %d is negative", p.BeforeID))
	}
	limit := p.Limit
	if limit == 0 {
		limit = JobListLimitDefault
	}
	limit = min(limit, JobListLimitMax)
	res, err := c.store.JobList(ctx, &twicestore.JobListParams{
		Filter: p.store(nil, c.now()), BeforeID: p.BeforeID, Limit: limit + 1,
	})
	if err != nil {
		return nil, fmt.Errorf("twice: %w", err) // the store's error says "list jobs"
	}
	out := &JobListResult{Jobs: res.Jobs}
	if len(out.Jobs) > limit {
		out.Jobs = out.Jobs[:limit]
		out.Next = out.Jobs[limit-1].ID
	}
	return out, nil
}

// JobActionParams select the jobs of a cancel, delete or retry, and say who
// acts and why (both are logged; a cancel also records them on the job).
type JobActionParams struct {
	// IDs names the jobs.
	IDs []int64
	// Filter selects the jobs instead, or narrows IDs. A nil Filter with no
	// IDs is refused, so an empty selection never means every job; to act
	// on every job, pass an empty non-nil filter.
	Filter *JobFilter
	By     string
	Reason string
	// Force makes JobRetry retry jobs whose effect is uncertain
	// (ReplayUncertain) too, which it otherwise skips; it needs a Reason,
	// logged with By and the forced jobs' ids. Only JobRetry and
	// JobRetryPreview take it.
	Force bool
}

// JobActionResult tells what a cancel, delete or retry did to each job.
type JobActionResult struct {
	// Jobs has one entry per job the selection matched and per id of IDs
	// that names no job, ordered by id.
	Jobs []JobResult
}

// JobResult is what an action did to one job.
type JobResult struct {
	ID int64
	// State is the job's state after the action (as found, when nothing
	// changed); empty when the job was deleted or not found.
	State twicetype.JobState
	// Changed reports that the action applied: the job was cancelled,
	// deleted or retried, or, for a running job, its cancel requested.
	Changed bool
	// CancelRequested reports a running job whose worker was asked to stop
	// it; it ends cancelled unless it finishes first.
	CancelRequested bool
	// Err says why nothing changed: it wraps ErrJobNotFound,
	// ErrJobFinished, ErrJobRunning, ErrJobNotRetryable,
	// ErrUniqueConflict or ErrRetryUncertain. Nil when Changed.
	Err error
}

// Changed lists the ids of the jobs the action applied to.
func (r *JobActionResult) Changed() []int64 {
	var ids []int64
	for _, j := range r.Jobs {
		if j.Changed {
			ids = append(ids, j.ID)
		}
	}
	return ids
}

// Err joins the errors of the jobs the action did not apply to; nil when it
// applied to all of them.
func (r *JobActionResult) Err() error {
	var errs []error
	for _, j := range r.Jobs {
		if j.Err != nil {
			errs = append(errs, j.Err)
		}
	}
	return errors.Join(errs...)
}

// jobAction is what one kind of bulk action does.
type jobAction int

const (
	actionCancel jobAction = iota
	actionDelete
	actionRetry
	actionDiscard
	actionRunNow
)

var jobActionNames = [...]string{"cancel", "delete", "retry", "discard", "run now"}

// JobCancel cancels jobs. A job waiting to run (due or scheduled) ends
// cancelled at once, with who and why recorded on it. A running job gets a
// cancel request: the node running it cancels the handler's context (at
// once on PostgreSQL, within about half a second otherwise) and the job
// ends cancelled, never retried — unless it finishes first. A finished job
// is left alone (ErrJobFinished). One job's refusal never stops the
// others: each gets its own JobResult.
func (c *Client) JobCancel(ctx context.Context, p *JobActionParams) (*JobActionResult, error) {
	return c.jobAction(ctx, c.store, actionCancel, p, true)
}

// JobCancelTx is JobCancel in the caller's transaction.
func (c *Client) JobCancelTx(ctx context.Context, tx any, p *JobActionParams) (*JobActionResult, error) {
	exec, err := c.adminExec("cancel jobs", tx)
	if err != nil {
		return nil, err
	}
	return c.jobAction(ctx, exec, actionCancel, p, false)
}

// JobDelete deletes jobs that are not running, whatever their state; a
// running job is refused (ErrJobRunning): cancel it first.
func (c *Client) JobDelete(ctx context.Context, p *JobActionParams) (*JobActionResult, error) {
	return c.jobAction(ctx, c.store, actionDelete, p, true)
}

// JobDeleteTx is JobDelete in the caller's transaction.
func (c *Client) JobDeleteTx(ctx context.Context, tx any, p *JobActionParams) (*JobActionResult, error) {
	exec, err := c.adminExec("delete jobs", tx)
	if err != nil {
		return nil, err
	}
	return c.jobAction(ctx, exec, actionDelete, p, false)
}

// JobRetry makes dead, discarded and cancelled jobs available again, with
// their attempts reset and their error history kept. A running job is
// refused (ErrJobRunning), as is one waiting to run (ErrJobNotRetryable),
// and one whose unique key another job of its kind holds
// (ErrUniqueConflict); the others are retried all the same. A job whose
// effect may have happened (ReplayUncertain: its own ClaimBefore claim, or
// a step claimed without a receipt) is skipped with an error wrapping
// ErrRetryUncertain, unless p.Force, with a Reason recorded in the job's
// history with p.By; see JobRetryPreview for what a retry would do before
// it does it.
//
// Completed jobs are replayed only when the filter asks for them (State
// completed): a retry by ids or by another filter refuses them
// (ErrJobNotRetryable), so work that succeeded never runs again by
// accident. Replayed, a job whose marker exists completes again without
// calling its handler's effect. A completed workflow task or batch member
// is refused even then (ReplayRefused): its completion fired its edges.
func (c *Client) JobRetry(ctx context.Context, p *JobActionParams) (*JobActionResult, error) {
	return c.jobAction(ctx, c.store, actionRetry, p, true)
}

// JobRetryTx is JobRetry in the caller's transaction.
func (c *Client) JobRetryTx(ctx context.Context, tx any, p *JobActionParams) (*JobActionResult, error) {
	exec, err := c.adminExec("retry jobs", tx)
	if err != nil {
		return nil, err
	}
	return c.jobAction(ctx, exec, actionRetry, p, false)
}

// JobDiscard marks dead jobs discarded: kept for the record until their
// retention ends, never retried by a bulk retry of dead jobs (a retry by id
// still brings one back). A job in any other state is refused with its
// state; the others are discarded all the same.
func (c *Client) JobDiscard(ctx context.Context, p *JobActionParams) (*JobActionResult, error) {
	return c.jobAction(ctx, c.store, actionDiscard, p, true)
}

// JobDiscardTx is JobDiscard in the caller's transaction.
func (c *Client) JobDiscardTx(ctx context.Context, tx any, p *JobActionParams) (*JobActionResult, error) {
	exec, err := c.adminExec("discard jobs", tx)
	if err != nil {
		return nil, err
	}
	return c.jobAction(ctx, exec, actionDiscard, p, false)
}

// JobRunNow makes jobs waiting for a later run time due now: a scheduled
// job, or a retry waiting out its backoff, runs at the next fetch, with its
// attempts as they are. A job already due is done too. A running,
// finished or waiting job (parked on a signal: send it instead) is refused
// with its state; the others run now all the same.
func (c *Client) JobRunNow(ctx context.Context, p *JobActionParams) (*JobActionResult, error) {
	return c.jobAction(ctx, c.store, actionRunNow, p, true)
}

// JobRunNowTx is JobRunNow in the caller's transaction.
func (c *Client) JobRunNowTx(ctx context.Context, tx any, p *JobActionParams) (*JobActionResult, error) {
	exec, err := c.adminExec("run jobs now", tx)
	if err != nil {
		return nil, err
	}
	return c.jobAction(ctx, exec, actionRunNow, p, false)
}

// jobAction runs one bulk action on exec. committed reports that exec is
// the store, so the action is committed when it returns: only then may
// this process act on it at once (cancel a handler running here, wake the
// fetch loop); after a caller's transaction, the other nodes' paths (the
// heartbeat, NOTIFY, the poll) pick it up once it commits.
func (c *Client) jobAction(ctx context.Context, exec twicestore.Executor, action jobAction, p *JobActionParams, committed bool) (*JobActionResult, error) {
	op := jobActionNames[action] + " jobs"
	filter, err := c.selection(op, p)
	if err != nil {
		return nil, err
	}
	if p.Force && action != actionRetry {
		return nil, fmt.Errorf("twice: %s: %w", op, invalidf("Force applies to a retry only"))
	}
	now := filter.Now
	by := byOr(p.By)
	var (
		res     *twicestore.JobBulkResult
		skipped []JobResult
	)
	switch action {
	case actionCancel:
		res, err = exec.JobCancel(ctx, &twicestore.JobCancelParams{Filter: filter, By: by, Reason: p.Reason, Now: now})
	case actionDelete:
		res, err = exec.JobDelete(ctx, &twicestore.JobBulkParams{Filter: filter, Now: now})
	case actionRetry:
		res, skipped, err = c.retrySkippingUncertain(ctx, exec, p, filter, now)
	case actionDiscard:
		res, err = exec.JobDiscard(ctx, &twicestore.JobBulkParams{Filter: filter, Now: now})
	case actionRunNow:
		res, err = exec.JobRunNow(ctx, &twicestore.JobBulkParams{Filter: filter, Now: now})
	}
	if err != nil {
		return nil, fmt.Errorf("twice: %w", err) // the store's error names the action
	}
	out := &JobActionResult{Jobs: make([]JobResult, len(res.Results))}
	for i, r := range res.Results {
		out.Jobs[i] = jobResult(action, r)
	}
	if len(skipped) > 0 {
		out.Jobs = append(out.Jobs, skipped...)
		sortResults(out.Jobs)
	}
	if changed := out.Changed(); len(changed) > 0 {
		c.logAction(ctx, "jobs "+jobActionDone[action], by, p.Reason, "ids", changed)
	}
	if !committed {
		return out, nil
	}
	for _, j := range out.Jobs {
		switch {
		case j.CancelRequested:
			// A handler running in this process stops now, not at the next
			// lease heartbeat.
			c.worker.running.cancel(j.ID, c.logger)
		case (action == actionRetry || action == actionRunNow) && j.Changed:
			c.notify()
		}
	}
	return out, nil
}

// selection checks an action's params and returns the store's filter for
// them, its Now set to the current time.
func (c *Client) selection(op string, p *JobActionParams) (twicestore.JobFilter, error) {
	if p == nil || (len(p.IDs) == 0 && p.Filter == nil) {
		return twicestore.JobFilter{}, fmt.Errorf("twice: %s: %w", op, invalidf("no jobs selected: name them by id, or give a filter"))
	}
	for _, id := range p.IDs {
		if id <= 0 {
			return twicestore.JobFilter{}, fmt.Errorf("twice: %s: %w", op, invalidf("job id %d is not positive", id))
		}
	}
	if err := checkFields(byField(p.By), reasonField(p.Reason)); err != nil {
		return twicestore.JobFilter{}, fmt.Errorf("twice: %s: %w", op, err)
	}
	if p.Force && strings.TrimSpace(p.Reason) == "" {
		return twicestore.JobFilter{}, fmt.Errorf("twice: %s: %w", op,
			invalidf("Force without a Reason: say why jobs whose effect may have happened should run again"))
	}
	var f JobFilter
	if p.Filter != nil {
		f = *p.Filter
		if err := f.validate(); err != nil {
			return twicestore.JobFilter{}, fmt.Errorf("twice: %s: %w", op, err)
		}
	}
	return f.store(p.IDs, c.now()), nil
}

var jobActionDone = [...]string{"cancelled", "deleted", "retried", "discarded", "made due now"}

// jobResult turns the store's verdict on one job into the API's, with the
// error that says what to do.
func jobResult(action jobAction, r twicestore.JobActionResult) JobResult {
	out := JobResult{ID: r.ID, State: r.State}
	switch r.Status {
	case twicestore.JobActionDone:
		out.Changed = true
	case twicestore.JobActionCancelRequested:
		out.Changed, out.CancelRequested = true, true
	case twicestore.JobActionNotFound:
		out.Err = fmt.Errorf("job %d: %w", r.ID, ErrJobNotFound)
	case twicestore.JobActionAlreadyFinished:
		out.Err = fmt.Errorf("job %d is %s: %w; nothing to cancel", r.ID, r.State, ErrJobFinished)
	case twicestore.JobActionConflict:
		out.Err = fmt.Errorf("job %d: %w (job %d): retry it once that job no longer holds the key (finished outside its ByStates, or deleted)", r.ID, ErrUniqueConflict, r.HolderID)
	case twicestore.JobActionComposed:
		out.Err = fmt.Errorf("job %d completed as a workflow task or batch member: %w: its completion fired its edges already; "+
			"enqueue its work anew to run it again", r.ID, ErrJobNotRetryable)
	case twicestore.JobActionWrongState:
		switch {
		case action == actionRunNow && r.State == twicetype.JobStateRunning:
			out.Err = fmt.Errorf("job %d is running already: %w", r.ID, ErrJobRunning)
		case r.State == twicetype.JobStateRunning:
			out.Err = fmt.Errorf("job %d: %w: cancel it first, or wait for it to finish", r.ID, ErrJobRunning)
		case action == actionRetry && r.State == twicetype.JobStateCompleted:
			out.Err = fmt.Errorf("job %d is completed: %w: a retry replays completed jobs only when asked for: select state completed "+
				"(JobFilter.State, --state completed), after a preview (JobRetryPreview, --dry-run) of which would really run", r.ID, ErrJobNotRetryable)
		case action == actionRetry:
			out.Err = fmt.Errorf("job %d is %s: %w", r.ID, r.State, ErrJobNotRetryable)
		case action == actionDiscard:
			out.Err = fmt.Errorf("job %d is %s: %w", r.ID, r.State, ErrJobNotDead)
		case action == actionRunNow && r.State == twicetype.JobStateWaiting:
			out.Err = fmt.Errorf("job %d is waiting for a signal, not a time: send it the signal (Client.Signal, twice jobs signal) to run it", r.ID)
		case action == actionRunNow:
			out.Err = fmt.Errorf("job %d is %s: only a job waiting to run (scheduled, or a retry waiting out its backoff) can run now", r.ID, r.State)
		case action == actionCancel && r.State.Finished():
			out.Err = fmt.Errorf("job %d is %s: %w; nothing to cancel", r.ID, r.State, ErrJobFinished)
		default:
			out.Err = fmt.Errorf("job %d: cannot %s a job that is %s", r.ID, jobActionNames[action], r.State)
		}
	default:
		out.Err = fmt.Errorf("job %d: the store answered %q", r.ID, r.Status)
	}
	return out
}
