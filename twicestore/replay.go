package twicestore

import (
	"context"
	"fmt"

	"github.com/twicejobs/twice/twicetype"
)

// Replayer is the part of Executor that previews a retry (what a replay
// of finished jobs would do, read in bulk, before anything runs) and
// records an operator's forced retry on the jobs it forced.
type Replayer interface {
	// JobRetryPreview reads, for up to Limit jobs the filter matches in a
	// state a retry takes (dead, discarded, cancelled, and completed with
	// Completed), in ascending id order after AfterID, what decides a
	// replay: the marker of the job's key under its kind's handler, its
	// steps' claims, and the job holding its unique key. It writes
	// nothing, and classifies each job with ClassifyReplay. It costs a
	// few statements per call, never one per job, so an incident's
	// thousands of jobs are previewed in seconds.
	JobRetryPreview(ctx context.Context, p *JobRetryPreviewParams) (*JobRetryPreviewResult, error)
	// JobHistoryAppend appends Entry to the error history of each job of
	// IDs, kept as an attempt's error is (ErrorsKeptFirst, ErrorsKeptLast):
	// a retry forced past an uncertain effect stays on the job, with who
	// and why, for whoever reads it after the next failure. An id that
	// names no job is skipped.
	JobHistoryAppend(ctx context.Context, p *JobHistoryAppendParams) error
}

// JobHistoryAppendParams name the jobs and the entry to append.
type JobHistoryAppendParams struct {
	IDs   []int64
	Entry twicetype.AttemptError
}

// ReplayKind is what a preview must know of a kind that the store does
// not: the handler name its markers and steps are written under, and its
// delivery strategy, as the caller's registry or the catalog states them.
type ReplayKind struct {
	Handler string
	// Strategy is the strategy's name: claim-after, claim-before,
	// transactional or none.
	Strategy string
}

// JobRetryPreviewParams select the jobs to preview.
type JobRetryPreviewParams struct {
	Filter JobFilter
	// Kinds names, per kind, its handler and strategy. A kind it does not
	// name is previewed with the kind as the handler name (the
	// registration default) and classified ReplayWillRun unless a marker
	// or a step says otherwise.
	Kinds map[string]ReplayKind
	// Completed previews completed jobs too, for a replay of work that
	// succeeded (after an incident that lost its effects, say).
	Completed bool
	// AfterID continues a preview: only jobs with a larger id are read.
	AfterID int64
	// Limit bounds the jobs read; zero or less reads them all.
	Limit int
}

// JobRetryPreviewResult has one entry per job, in ascending id order.
type JobRetryPreviewResult struct {
	Jobs []ReplayJob
}

// ReplayJob is what a preview found for one job.
type ReplayJob struct {
	ID        int64
	Kind      string
	State     twicetype.JobState
	UniqueKey string
	// Marker reports that the marker of the job's key exists under its
	// kind's handler; MarkerJobID is the job that claimed it (0: unknown).
	Marker      bool
	MarkerJobID int64
	// StepsOpen counts the job's steps claimed without a receipt (their
	// effect may or may not have happened); StepsDone those with one.
	StepsOpen, StepsDone int
	// HolderID is another job holding the job's unique key, which a retry
	// would conflict with; 0 when none does.
	HolderID int64
	// WorkflowID and WorkflowTask name the workflow task the job is (0 and
	// empty when none); BatchID its batch (0 when none).
	WorkflowID   int64
	WorkflowTask string
	BatchID      int64
	// Class is ClassifyReplay's verdict.
	Class ReplayClass
}

// ReplayClass is what a retry would do to one job.
type ReplayClass string

// The classes of a retry preview.
const (
	// ReplayNoop: the job's marker exists, so a replay completes it as a
	// no-op without calling the handler's effect.
	ReplayNoop ReplayClass = "no-op"
	// ReplayWillRun: no marker: a replay calls the handler, and its effect
	// happens again (steps with receipts are skipped).
	ReplayWillRun ReplayClass = "will-run"
	// ReplayUncertain: a ClaimBefore claim this job made, or a step claimed
	// without a receipt: the effect may have happened. A replay would be
	// dead-lettered again (ErrEffectUncertain) or repeat the effect; settle
	// it first (StepSettle, MarkerRelease).
	ReplayUncertain ReplayClass = "uncertain"
	// ReplayBlocked: another job holds the job's unique key; a retry
	// conflicts and changes nothing.
	ReplayBlocked ReplayClass = "blocked"
	// ReplayRefused: a completed workflow task or batch member. Its
	// completion released its dependents or counted in its batch already,
	// so a retry leaves it as it is (JobActionComposed); enqueue its work
	// anew instead.
	ReplayRefused ReplayClass = "refused"
)

// ReplayClasses lists the classes in the order previews show them.
var ReplayClasses = []ReplayClass{ReplayNoop, ReplayWillRun, ReplayUncertain, ReplayBlocked, ReplayRefused}

// ClassifyReplay decides a job's class from what a preview read and its
// kind's strategy, the same way JobRetry and the runtime decide: a
// completed workflow task or batch member first (JobRetry refuses it),
// then a held unique key (the retry would not happen at all), then a step
// left open, then the strategy's marker. A ClaimBefore claim made by the job
// itself is uncertain, not a no-op: the runtime treats a claim of an
// earlier delivery of the same job as an interrupted effect. Drivers call
// it on every job they return.
func ClassifyReplay(j *ReplayJob, strategy string) ReplayClass {
	switch {
	case j.State == twicetype.JobStateCompleted && (j.WorkflowID != 0 || j.BatchID != 0):
		return ReplayRefused
	case j.HolderID != 0:
		return ReplayBlocked
	case j.StepsOpen > 0:
		return ReplayUncertain
	case strategy == "none" || !j.Marker:
		return ReplayWillRun
	case strategy == "claim-before" && j.MarkerJobID == j.ID:
		return ReplayUncertain
	default:
		return ReplayNoop
	}
}

// Handler returns the handler name the preview uses for kind.
func (p *JobRetryPreviewParams) Handler(kind string) string {
	if k, ok := p.Kinds[kind]; ok && k.Handler != "" {
		return k.Handler
	}
	return kind
}

// Classify sets the Class of every job from its kind's strategy.
func (p *JobRetryPreviewParams) Classify(jobs []ReplayJob) {
	for i := range jobs {
		jobs[i].Class = ClassifyReplay(&jobs[i], p.Kinds[jobs[i].Kind].Strategy)
	}
}

// States lists the states the preview reads.
func (p *JobRetryPreviewParams) States() []twicetype.JobState {
	st := []twicetype.JobState{twicetype.JobStateDead, twicetype.JobStateDiscarded, twicetype.JobStateCancelled}
	if p.Completed {
		st = append(st, twicetype.JobStateCompleted)
	}
	return st
}

// Validate refuses params no driver could apply; drivers call it first.
func (p *JobRetryPreviewParams) Validate() error {
	if err := p.Filter.Validate(); err != nil {
		return fmt.Errorf("preview retry: %w", err)
	}
	for kind, k := range p.Kinds {
		switch k.Strategy {
		case "", "claim-after", "claim-before", "transactional", "none":
		default:
			return fmt.Errorf("preview retry: kind %q: strategy %q is not claim-after, claim-before, transactional or none", kind, k.Strategy)
		}
	}
	return nil
}
