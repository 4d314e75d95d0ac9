package twice

// A retry after an incident is the moment a queue most often repeats
// effects nobody meant to repeat: Sidekiq's "retry all", River's JobRetry
// and bulk replays elsewhere re-run blindly. twice knows per job whether a
// replay will be absorbed by its marker, will really run, or meets an
// effect that may have happened (a ClaimBefore claim or a step without a
// receipt): JobRetryPreview says so before anything runs, and JobRetry
// acts on the same classification, skipping the uncertain jobs unless
// forced with a reason. Completed jobs are replayed the same way when the
// selection asks for them (state completed), but for workflow tasks and
// batch members, whose completion fired its edges already.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// ReplayClass is what a retry would do to one job.
type ReplayClass = twicestore.ReplayClass

// The classes of a retry preview.
const (
	// ReplayNoop: the job's marker exists under its kind's handler (or,
	// for ClaimBefore, another job's claim of its key does), so a replay
	// completes it without calling the handler's effect.
	ReplayNoop = twicestore.ReplayNoop
	// ReplayWillRun: no marker: a replay calls the handler and the effect
	// happens again (steps with receipts are skipped).
	ReplayWillRun = twicestore.ReplayWillRun
	// ReplayUncertain: the job's own ClaimBefore claim, or a step claimed
	// without a receipt: the effect may have happened. JobRetry skips the
	// job unless forced; settle it first (`twice markers release`,
	// StepSettle), or discard it.
	ReplayUncertain = twicestore.ReplayUncertain
	// ReplayBlocked: another job holds the job's unique key, so a retry
	// conflicts (ErrUniqueConflict) and changes nothing.
	ReplayBlocked = twicestore.ReplayBlocked
	// ReplayRefused: a completed workflow task or batch member. Its
	// completion released the tasks depending on it, or counted in its
	// batch (and may have fired the callback), so JobRetry leaves it
	// (ErrJobNotRetryable): enqueue its work anew to run it again.
	ReplayRefused = twicestore.ReplayRefused
)

// ReplayClasses lists the classes in the order previews show them.
var ReplayClasses = twicestore.ReplayClasses

// RetryPreviewSamples is how many job ids a RetryPreview keeps per class.
const RetryPreviewSamples = 10

// retryPreviewPage is how many jobs one store call previews: one
// statement reads a page, so 10,000 jobs cost two round trips.
const retryPreviewPage = 5000

// RetryPreview is what a retry of a selection would do, per class.
type RetryPreview struct {
	// Total is the number of jobs classified: those a retry takes (dead,
	// discarded, cancelled) and, when the filter asks for completed jobs
	// (State completed), those.
	Total int
	// Counts is the number of jobs per class; a class with none is absent.
	Counts map[ReplayClass]int
	// Samples are the lowest ids of each class, at most
	// RetryPreviewSamples of them.
	Samples map[ReplayClass][]int64
	// Completed counts the completed jobs among them. JobRetry with the
	// same params replays them as their classes say: the no-ops complete
	// again without calling the effect, the will-run ones run it again,
	// the uncertain ones are skipped unless forced, and the blocked and
	// refused ones (workflow tasks, batch members) are left as they are.
	Completed int
	// Forced reports that the preview was asked with Force, so uncertain
	// jobs are counted as a retry would take them: all retried.
	Forced bool
}

// JobRetryPreview says, without changing anything, what JobRetry with the
// same params would do to each job it selects: a no-op (its marker
// absorbs the replay), a real run, an uncertain effect (skipped unless
// Force), a conflict on a unique key, or a refusal (a completed workflow
// task or batch member). A filter with State completed previews completed
// jobs, which JobRetry with that filter replays (see
// RetryPreview.Completed). The jobs are read in pages of a few thousand,
// each in one statement, never one round trip per job.
//
// Each kind is read with the handler name and strategy the client's
// registry gives it, or for a kind it does not register, with the
// strategy and handler name the catalog publishes (the kind, for an entry
// published before the catalog carried handler names).
func (c *Client) JobRetryPreview(ctx context.Context, p *JobActionParams) (*RetryPreview, error) {
	const op = "preview retry"
	filter, err := c.selection(op, p)
	if err != nil {
		return nil, err
	}
	jobs, err := c.replayJobs(ctx, c.store, filter, p.Force)
	if err != nil {
		return nil, err
	}
	out := &RetryPreview{Total: len(jobs), Counts: map[ReplayClass]int{}, Samples: map[ReplayClass][]int64{}, Forced: p.Force}
	for _, j := range jobs {
		out.Counts[j.Class]++
		if len(out.Samples[j.Class]) < RetryPreviewSamples {
			out.Samples[j.Class] = append(out.Samples[j.Class], j.ID)
		}
		if j.State == twicetype.JobStateCompleted {
			out.Completed++
		}
	}
	return out, nil
}

// replayJobs classifies every job filter selects, in id order, as a retry
// would meet them: a job whose unique key a job earlier in the selection
// takes back is blocked by it too, as JobRetry retries only the lowest id
// of a key; an uncertain job takes nothing back unless forced, and a
// refused one never. Completed jobs are read when the filter's State is
// completed, as JobRetry then retries them.
func (c *Client) replayJobs(ctx context.Context, exec twicestore.Executor, filter twicestore.JobFilter, force bool) ([]twicestore.ReplayJob, error) {
	kinds, err := c.replayKinds(ctx, exec)
	if err != nil {
		return nil, err
	}
	p := &twicestore.JobRetryPreviewParams{Filter: filter, Kinds: kinds, Limit: retryPreviewPage,
		Completed: replaysCompleted(filter)}
	type ref struct{ kind, key string }
	taken := map[ref]int64{}
	var out []twicestore.ReplayJob
	for {
		res, err := exec.JobRetryPreview(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("twice: %w", err) // the store's error says "preview retry"
		}
		for _, j := range res.Jobs {
			r := ref{j.Kind, j.UniqueKey}
			switch {
			case j.UniqueKey == "" || j.Class == ReplayBlocked || j.Class == ReplayRefused:
			case j.Class == ReplayUncertain && !force:
			case taken[r] != 0:
				j.Class, j.HolderID = ReplayBlocked, taken[r]
			default:
				taken[r] = j.ID
			}
			out = append(out, j)
		}
		if len(res.Jobs) < retryPreviewPage {
			return out, nil
		}
		p.AfterID = res.Jobs[len(res.Jobs)-1].ID
	}
}

// replaysCompleted reports whether a retry of filter takes completed jobs:
// only when it asks for them, so a retry by id or by another state never
// replays a job that succeeded.
func replaysCompleted(filter twicestore.JobFilter) bool {
	return filter.State == twicetype.JobStateCompleted
}

// replayKinds names each kind's handler and strategy: the registry's for
// the kinds it registers, the catalog's for the others.
func (c *Client) replayKinds(ctx context.Context, exec twicestore.Executor) (map[string]twicestore.ReplayKind, error) {
	cat, err := exec.CatalogList(ctx, &twicestore.CatalogListParams{})
	if err != nil {
		return nil, fmt.Errorf("twice: preview retry: %w", err)
	}
	kinds := make(map[string]twicestore.ReplayKind, len(cat.Kinds))
	for _, k := range cat.Kinds {
		if _, err := ParseStrategy(k.Strategy); err == nil {
			kinds[k.Kind] = twicestore.ReplayKind{Handler: k.Handler(), Strategy: k.Strategy}
		}
	}
	for _, kind := range c.registry.Kinds() {
		if e := c.registry.lookup(kind); e != nil {
			kinds[kind] = twicestore.ReplayKind{Handler: e.opts.HandlerName, Strategy: e.opts.Strategy.String()}
		}
	}
	return kinds, nil
}

// retrySkippingUncertain is JobRetry's path: the selection is classified
// first; its refused jobs (completed workflow tasks and batch members)
// and, unless p.Force, its uncertain ones are left out of the retry, each
// with a result saying why and what to do. With none left out, the store's
// retry runs on the selection as it always did.
func (c *Client) retrySkippingUncertain(ctx context.Context, exec twicestore.Executor, p *JobActionParams,
	filter twicestore.JobFilter, now time.Time) (*twicestore.JobBulkResult, []JobResult, error) {
	jobs, err := c.replayJobs(ctx, exec, filter, p.Force)
	if err != nil {
		return nil, nil, err
	}
	var skipped []JobResult
	var forced, rest []int64
	for _, j := range jobs {
		switch {
		case j.Class == ReplayRefused:
			skipped = append(skipped, JobResult{ID: j.ID, State: j.State, Err: composedErr(&j)})
		case j.Class != ReplayUncertain:
			rest = append(rest, j.ID)
		case p.Force:
			forced = append(forced, j.ID)
			rest = append(rest, j.ID)
		default:
			skipped = append(skipped, JobResult{ID: j.ID, State: j.State, Err: uncertainErr(&j)})
		}
	}
	if len(skipped) == 0 {
		res, err := c.retryForced(ctx, exec, filter, forced, p, now)
		return res, nil, err
	}
	// Narrow the retry to the others: the ids asked for, or the jobs the
	// preview found, less the skipped ones. None left: nothing to retry.
	ids := rest
	if len(filter.IDs) > 0 {
		skip := make(map[int64]bool, len(skipped))
		for _, s := range skipped {
			skip[s.ID] = true
		}
		ids = slices.DeleteFunc(slices.Clone(filter.IDs), func(id int64) bool { return skip[id] })
	}
	if len(ids) == 0 {
		return &twicestore.JobBulkResult{}, skipped, nil
	}
	filter.IDs = ids
	res, err := c.retryForced(ctx, exec, filter, forced, p, now)
	return res, skipped, err
}

// retryForced retries filter's jobs and records on each forced one that it
// was retried despite an uncertain effect, by whom and why, in the job's
// error history, in the same transaction: on the store, one the client
// begins; otherwise the caller's.
func (c *Client) retryForced(ctx context.Context, exec twicestore.Executor, filter twicestore.JobFilter, forced []int64,
	p *JobActionParams, now time.Time) (*twicestore.JobBulkResult, error) {
	bulk := &twicestore.JobBulkParams{Filter: filter, Now: now, Completed: replaysCompleted(filter)}
	if len(forced) == 0 {
		return exec.JobRetry(ctx, bulk)
	}
	store, owned := exec.(twicestore.Store)
	if owned {
		tx, err := store.Begin(ctx)
		if err != nil {
			return nil, fmt.Errorf("retry jobs: %w", err)
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // after Commit, a no-op
		exec = tx
	}
	res, err := exec.JobRetry(ctx, bulk)
	if err != nil {
		return nil, err
	}
	retried := slices.DeleteFunc(slices.Clone(forced), func(id int64) bool { _, found := slices.BinarySearch(res.IDs, id); return !found })
	if len(retried) > 0 {
		entry := twicetype.AttemptError{At: now, Error: fmt.Sprintf("retried by %s despite an uncertain effect (forced): %s", byOr(p.By), p.Reason)}
		if err := exec.JobHistoryAppend(ctx, &twicestore.JobHistoryAppendParams{IDs: retried, Entry: entry}); err != nil {
			return nil, fmt.Errorf("retry jobs: %w", err)
		}
		c.logAction(ctx, "jobs retried despite an uncertain effect", byOr(p.By), p.Reason, "ids", retried)
	}
	if owned {
		if err := exec.(twicestore.Tx).Commit(ctx); err != nil {
			return nil, fmt.Errorf("retry jobs: %w", err)
		}
	}
	return res, nil
}

// ErrRetryUncertain is why JobRetry skips a job whose effect may have
// happened (ReplayUncertain): it holds its own ClaimBefore claim, or a step
// claimed without a receipt. Check whether the effect happened, then
// settle the claim (`twice markers release`, StepSettle) and retry, or
// discard the job, or retry it with Force and a Reason.
var ErrRetryUncertain = errors.New("twice: the job's effect may have happened, so it was not retried")

// uncertainErr says why j was skipped and what to do.
func uncertainErr(j *twicestore.ReplayJob) error {
	what := "its own claim-before claim of its marker"
	if j.StepsOpen > 0 {
		what = fmt.Sprintf("%d step(s) claimed without a receipt", j.StepsOpen)
	}
	return fmt.Errorf("job %d: %w (%s): check whether the effect happened, then settle it "+
		"(twice markers release, or the step's settle) or discard the job, or retry it forced with a reason "+
		"(Force and Reason; --force --reason in the CLI)", j.ID, ErrRetryUncertain, what)
}

// composedErr says why a completed workflow task or batch member was left
// out of a replay, and what to do instead.
func composedErr(j *twicestore.ReplayJob) error {
	if j.WorkflowID != 0 {
		return fmt.Errorf("job %d completed as task %q of workflow %d: %w: its completion released the tasks that "+
			"depend on it already, so a retry in place would count it twice; to run it again, enqueue its work anew "+
			"(a new workflow, or Enqueue)", j.ID, j.WorkflowTask, j.WorkflowID, ErrJobNotRetryable)
	}
	return fmt.Errorf("job %d completed as a member of batch %d: %w: it counted in its batch already (whose callback "+
		"may have run), so a retry in place would count it twice; to run it again, enqueue its work anew",
		j.ID, j.BatchID, ErrJobNotRetryable)
}

// sortResults orders an action's results by job id.
func sortResults(rs []JobResult) {
	slices.SortFunc(rs, func(a, b JobResult) int { return cmp.Compare(a.ID, b.ID) })
}
