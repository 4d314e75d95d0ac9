package twicestore

import (
	"fmt"
	"time"

	"github.com/twicejobs/twice/twicetype"
)

// JobInsertParams is one job to insert.
type JobInsertParams struct {
	Kind          string
	Queue         string
	Priority      int
	Args          []byte
	MessageID     string
	Key           string
	CorrelationID string
	UniqueKey     string
	MaxAttempts   int
	RunAt         time.Time
	CreatedAt     time.Time
	// Metadata is carried from the enqueuer to the handler (a trace
	// context, say); nil stores none.
	Metadata map[string]string
	// ConcurrencyKey partitions the kind's jobs for KindLimit.PerKey and
	// KindLimit.KeyRate (a tenant, a customer); empty is no key. At most
	// MaxConcurrencyKeyBytes.
	ConcurrencyKey string
	// Replace, for a job with a UniqueKey, moves Args and RunAt onto the
	// holder of the key when it is available (waiting), guarded by that
	// state in the store; a running or finished holder is left alone and
	// the result is a plain duplicate. A holder that finished meanwhile in
	// a state outside its UniqueStates no longer holds the key, and the
	// job is inserted.
	Replace bool
	// UniqueStates are the states in which the job holds UniqueKey: while
	// its current state is among them, no other job of its kind can be
	// inserted with that key (nor retried into holding it). They must
	// include available and running; finished states may be added (a
	// completed job keeps its key until retention deletes it, say). Zero
	// is twicetype.UniqueStatesDefault, available and running; the insert
	// fails, inserting nothing, for states that fail
	// twicetype.UniqueStates.Validate.
	UniqueStates twicetype.UniqueStates
	// ParentID, when set, records the job whose completion inserted this
	// one (a continuation's edge); JobFinish sets it for Children.
	ParentID int64
	// BatchID, when set, puts the job in that batch (see BatchAdd).
	BatchID int64
}

// JobInsertManyParams are the jobs to insert, in order.
type JobInsertManyParams struct {
	Jobs []*JobInsertParams
}

// JobInsertResult is the outcome of one insert.
type JobInsertResult struct {
	Job       *twicetype.JobRow
	Duplicate bool // the unique key is held by this existing job (unfinished, or finished in one of its UniqueStates)
	Replaced  bool // with Replace: the duplicate took this job's args and run time
}

// JobInsertManyResult has one result per inserted job, in input order.
type JobInsertManyResult struct {
	Jobs []*JobInsertResult
}

// JobFetchParams select and lease jobs.
type JobFetchParams struct {
	Queue      string
	Kinds      []string // only jobs of these kinds are fetched
	Limit      int
	Node       string
	Now        time.Time
	LeaseUntil time.Time
	// Peek names, per kind, the handler whose marker the fetch peeks for
	// each leased job of that kind (the marker of the job's Key), so a
	// ClaimAfter job starts without a peek of its own. Kinds it does not
	// name are not peeked.
	Peek map[string]string
	// Limits are the flow-control limits of the fetched kinds, as the
	// caller's registry states them; a kind it does not name, or names
	// with a zero KindLimit, is not limited. The fetch leases no job a
	// limit holds back, and decides so in the transaction that leases,
	// so concurrent fetchers on any number of nodes never exceed a limit
	// (every node must state the same limits: a node that states none
	// fetches the kind unlimited). A fetch with no limits costs what it
	// did before limits existed.
	Limits map[string]KindLimit
}

// JobFetchResult holds the leased jobs.
type JobFetchResult struct {
	Jobs []*twicetype.JobRow
	// Processed tells, per job in Jobs, whether the marker Peek names for
	// its kind existed when the job was leased: what MarkerPeek would have
	// said then. False for a kind Peek does not name.
	Processed []bool
	// Throttled reports that a limit held back due jobs this fetch could
	// otherwise have leased: a slot freed anywhere (a job of the kind
	// finishing) may let them start, so the caller should fetch again
	// then rather than wait for its poll.
	Throttled bool
	// RetryAt, when set, is when a kind-wide rate limit that held due
	// jobs back frees its next start (the oldest start in its window plus
	// its period): the caller should fetch again then, rather than at its
	// next poll, or the measured rate falls short of the limit by the
	// poll's share of each period. Per-key rate limits do not set it:
	// with many keys, waking for each would be a storm of fetches.
	RetryAt time.Time
}

// JobLease names one lease: a job and the epoch its holder fetched it with.
type JobLease struct {
	ID    int64
	Epoch int64
}

// JobExtendLeaseParams extend leases to LeaseUntil.
type JobExtendLeaseParams struct {
	Leases     []JobLease
	LeaseUntil time.Time
}

// JobExtendLeaseResult lists the job ids whose lease was extended; the
// others were lost (rescued and possibly fetched by someone else).
type JobExtendLeaseResult struct {
	Extended []int64
	// CancelRequested lists the extended jobs an operator asked to cancel
	// (JobCancel): their workers should stop them and finish them as
	// cancelled. Ascending.
	CancelRequested []int64
}

// JobOutcome is what became of one attempt.
type JobOutcome struct {
	ID    int64
	Epoch int64
	// State is completed, available (retry, snooze or requeue), waiting
	// (a park), dead or cancelled.
	State twicetype.JobState
	// RunAt is when an available job may run again, and when a waiting
	// job's timer fires (zero: never, stored as WaitNever).
	RunAt time.Time
	// WaitName is the wait a waiting outcome parks on.
	WaitName string
	// SignalSeq is the job's SignalSeq as its delivery was fetched with.
	// A waiting outcome whose job's SignalSeq grew since (a signal or a
	// timer resolved one of its waits meanwhile) makes the job available
	// at once instead: its handler runs again and reads what arrived.
	SignalSeq int64
	// RefundAttempt gives the attempt back: snoozes and shutdown requeues
	// do not spend one.
	RefundAttempt bool
	// Snooze counts the outcome as a snooze: the job's Snoozes grows by
	// one.
	Snooze bool
	// Error, when set, is appended to the job's error history, which is
	// then cut to its first ErrorsKeptFirst and last ErrorsKeptLast
	// entries.
	Error *twicetype.AttemptError
	// Note says why the job finished as it did (a no-op's reason, say). A
	// cancelled outcome with no Note takes the one of the job's cancel
	// request, if it has one.
	Note string
	// FinishedAt is when the job reached a terminal state.
	FinishedAt time.Time
	// Marker, when set, is claimed in the same transaction.
	Marker *MarkerParams
	// Output, when set on a completed outcome, is stored as the job's
	// output (JSON, at most MaxOutputBytes) in the same write.
	Output []byte
	// Children are inserted in the same transaction, each with ParentID
	// set to the job, when a completed outcome is written (see
	// Composer for the exact rule); otherwise they are dropped.
	Children []*JobInsertParams
	// Trace replaces the job's Trace: the trace context of the attempt
	// this outcome ends, empty when it had none (at most MaxTraceBytes).
	Trace string
}

// MaxTraceBytes bounds a JobOutcome's Trace: a W3C traceparent is 55
// bytes; the rest leaves room for a tracer's own format.
const MaxTraceBytes = 256

// A job's error history keeps its first ErrorsKeptFirst and its last
// ErrorsKeptLast attempt errors: the first say how the trouble began, the
// last what it is now, and a job that fails a thousand times does not
// carry a thousand errors into every listing. The dropped ones show as a
// gap in the attempt numbers.
const (
	ErrorsKeptFirst = 2
	ErrorsKeptLast  = 8
)

// JobFinishParams record a batch of outcomes.
type JobFinishParams struct {
	Outcomes []*JobOutcome
}

// JobFinishResult tells, per outcome in input order, whether it was written.
// False means the lease was lost: the job is no longer running under that
// epoch.
type JobFinishResult struct {
	Applied []bool
	// Inserted reports that the write inserted jobs (continuations,
	// released workflow tasks, a batch callback), which may be due now. A
	// store that wakes every node on inserts (InsertListener) may leave it
	// false for the jobs its own wake-ups announce.
	Inserted bool
}

// JobRescueParams select expired leases.
type JobRescueParams struct {
	Now   time.Time
	Limit int
}

// JobRescueResult lists what the rescue did.
type JobRescueResult struct {
	Requeued  []int64
	Dead      []int64
	Cancelled []int64 // jobs with a cancel request, finished as cancelled
	// Jobs are the rescued jobs as the rescue left them, in id order: what
	// the runtime logs, without reading each one back.
	Jobs []*twicetype.JobRow
}

// JobGetParams name one job.
type JobGetParams struct {
	ID int64
}

// JobFilter narrows a listing or a bulk action. Zero fields match anything.
type JobFilter struct {
	IDs   []int64
	State twicetype.JobState
	Kind  string
	Queue string
	// Node matches the node that holds the lease of a running job (or
	// last held it, for a job in another state): with State running, the
	// jobs a node is working now.
	Node string
	// Timing keeps available jobs due by Now (JobDue) or later
	// (JobScheduled); it matches no job in another state.
	Timing JobTiming
	// Now is the time Timing compares RunAt with; zero is the current
	// time.
	Now time.Time
	// CorrelationID matches the jobs enqueued with this correlation id.
	CorrelationID string
	// Metadata matches the jobs whose Metadata holds every one of these
	// pairs (and maybe others); empty matches any.
	Metadata map[string]string
}

// JobTiming tells due jobs from scheduled ones in a JobFilter.
type JobTiming string

// The timings a JobFilter can ask for.
const (
	// JobDue matches available jobs whose RunAt is at or before Now: those
	// a worker would fetch now.
	JobDue JobTiming = "due"
	// JobScheduled matches available jobs whose RunAt is after Now
	// (delays, retry backoffs, snoozes).
	JobScheduled JobTiming = "scheduled"
)

// Validate refuses a filter no driver could apply; drivers call it first.
func (f *JobFilter) Validate() error {
	if f.State != "" && !f.State.Valid() {
		return fmt.Errorf("job filter: state %q is not one of %v", f.State, twicetype.AllJobStates)
	}
	switch f.Timing {
	case "", JobDue, JobScheduled:
	default:
		return fmt.Errorf("job filter: timing %q is not %q or %q", f.Timing, JobDue, JobScheduled)
	}
	if _, ok := f.Metadata[""]; ok {
		return fmt.Errorf("job filter: a metadata pair has no key")
	}
	return nil
}

// JobListParams filter and page a listing.
type JobListParams struct {
	Filter JobFilter
	// BeforeID continues a listing: only jobs with a smaller id are listed.
	BeforeID int64
	Limit    int
}

// JobListResult is one page of jobs, newest first.
type JobListResult struct {
	Jobs []*twicetype.JobRow
}

// JobCountParams filter a count.
type JobCountParams struct {
	Filter JobFilter
}

// JobCount is the number of jobs in one state, queue and kind.
type JobCount struct {
	State twicetype.JobState
	Queue string
	Kind  string
	Count int
}

// JobCountResult holds the counts, grouped by state, queue and kind.
type JobCountResult struct {
	Counts []JobCount
}

// JobBulkParams select the jobs a bulk action applies to. The action's own
// state guard (dead for discard; dead, discarded or cancelled for retry,
// and completed with Completed; not running for delete) always applies on
// top.
type JobBulkParams struct {
	Filter JobFilter
	Now    time.Time
	// Completed lets JobRetry take completed jobs too (a replay of work
	// that succeeded), except a workflow task's job or a batch member
	// (JobActionComposed). Without it a completed job is refused
	// (JobActionWrongState), so only a caller that asked for completed
	// jobs replays them. Other actions ignore it.
	Completed bool
}

// JobCancelParams select the jobs to cancel and say who asks and why.
type JobCancelParams struct {
	Filter JobFilter
	By     string // who asks (user@host for the CLI)
	Reason string // why, as the operator typed it
	Now    time.Time
}

// JobBulkResult tells what a bulk action did.
type JobBulkResult struct {
	// IDs lists the jobs the action changed (for JobCancel, those
	// cancelled at once and those now with a cancel request), ascending.
	IDs []int64
	// Results has one entry per job the filter matched, whatever the
	// action's state guard made of it, and one per id of Filter.IDs the
	// filter matched no job for (JobActionNotFound), ordered by id.
	Results []JobActionResult
}

// JobActionStatus is what a bulk action did to one job.
type JobActionStatus string

// What a bulk action can do to one job.
const (
	// JobActionDone: the job was retried, discarded, cancelled or deleted.
	JobActionDone JobActionStatus = "done"
	// JobActionCancelRequested: the job is running; its worker was asked
	// to stop it (or had been asked before).
	JobActionCancelRequested JobActionStatus = "cancel_requested"
	// JobActionNotFound: no job has the id.
	JobActionNotFound JobActionStatus = "not_found"
	// JobActionAlreadyFinished: a cancel found the job finished; nothing
	// changed.
	JobActionAlreadyFinished JobActionStatus = "already_finished"
	// JobActionWrongState: the action does not apply to the job's state
	// (JobActionResult.State); nothing changed.
	JobActionWrongState JobActionStatus = "wrong_state"
	// JobActionConflict: a retry found the job's unique key
	// held by another job of its kind (JobActionResult.HolderID), unfinished
	// or finished in one of its UniqueStates; nothing changed.
	JobActionConflict JobActionStatus = "conflict"
	// JobActionComposed: a retry with Completed found the job completed
	// as a workflow task or a batch member. Its completion already
	// released its dependents or counted in its batch, so retrying it in
	// place would move those again; nothing changed.
	JobActionComposed JobActionStatus = "composed"
)

// JobActionResult is what a bulk action did to one job.
type JobActionResult struct {
	ID     int64
	Status JobActionStatus
	// State is the job's state after the action (as found, when the
	// action changed nothing); empty when not found or deleted.
	State twicetype.JobState
	// HolderID is the job holding the unique key, for a conflict.
	HolderID int64
}

// JobDeleteFinishedParams are the retention cut-offs, per finished state.
type JobDeleteFinishedParams struct {
	CompletedBefore time.Time
	DeadBefore      time.Time
	DiscardedBefore time.Time
	CancelledBefore time.Time
	Limit           int
	// After carries a pass of batches on from the batch before
	// (JobDeleteFinishedResult.After): a batch looks at no job of a state
	// at or below the state's id here. The jobs deleted earlier in the pass
	// lie there, and while a long transaction keeps vacuum from removing
	// them, reading past them again costs a visit each, every batch. nil
	// starts at each state's oldest job: a pass starts anew, so a job that
	// finished after it began, with an id below its cursor, goes in the
	// next pass.
	After map[twicetype.JobState]int64
}

// JobDeleteFinishedResult counts the jobs deleted.
type JobDeleteFinishedResult struct {
	Deleted int
	// After is the After of the next batch of the same pass: each state's
	// highest id deleted so far in it.
	After map[twicetype.JobState]int64
}

// JobOrphansParams define which nodes count as alive.
type JobOrphansParams struct {
	AliveSince time.Time
}

// JobOrphansResult lists the orphaned kinds.
type JobOrphansResult struct {
	Kinds []twicetype.OrphanKind
}

// JobThroughputParams select a window of finished jobs.
type JobThroughputParams struct {
	Since, Until time.Time
	// Bucket is the width of one bucket; it must be positive.
	Bucket time.Duration
}

// Validate refuses a window that has no buckets; drivers call it first.
func (p *JobThroughputParams) Validate() error {
	switch {
	case p.Bucket <= 0:
		return fmt.Errorf("job throughput: bucket %s is not positive", p.Bucket)
	case !p.Until.After(p.Since):
		return fmt.Errorf("job throughput: Until %s is not after Since %s", p.Until, p.Since)
	}
	return nil
}

// ThroughputBucket counts the jobs that finished in [Start, Start+Bucket).
type ThroughputBucket struct {
	Start     time.Time
	Completed int
	Dead      int
}

// JobThroughputResult holds the buckets that have jobs, oldest first;
// buckets with none are left out.
type JobThroughputResult struct {
	Buckets []ThroughputBucket
}
