// Package twicestore is the storage seam of twice: the small interface every
// driver implements and the runtime talks to. Each method takes a context and
// one *XxxParams struct and returns a result struct; drivers map their own
// errors to the sentinels here, so no backend type crosses the seam.
//
// Optional capabilities (such as wake-up notifications on PostgreSQL) are
// separate interfaces that callers find by type assertion.
//
// The conformance suite in storetest is the full contract: its package doc
// lists the conventions these method docs leave open (zero times and
// limits, ordering, what a rescue records), and every driver must pass it
// unchanged.
package twicestore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twicejobs/twice/twicetype"
)

// Errors every driver maps its own failures to.
var (
	// ErrNotFound means the row asked for does not exist.
	ErrNotFound = errors.New("twicestore: not found")
	// ErrSchemaTooNew means the database was migrated by a newer twice than
	// this binary; running against it could corrupt jobs, so nothing runs.
	ErrSchemaTooNew = errors.New("twicestore: database schema is newer than this binary")
	// ErrNotMigrated means the database has no twice tables yet.
	ErrNotMigrated = errors.New("twicestore: database is not migrated")
	// ErrWrongTx means a transaction of another driver or database type was
	// passed where this driver's transaction was expected.
	ErrWrongTx = errors.New("twicestore: transaction type not supported by this driver")
	// ErrLockTimeout means a statement gave up waiting for a lock another
	// transaction held (a frozen worker's, say) after the time its driver
	// allows. The transaction it ran in is spoilt and must be rolled back;
	// the work can be retried from the start, soon.
	ErrLockTimeout = errors.New("twicestore: gave up waiting for a lock another transaction holds")
)

// Executor runs twice's queries, either on the store's pool or inside a
// transaction.
type Executor interface {
	// JobInsertMany inserts jobs in one round trip. A job whose UniqueKey
	// is held by a job of the same kind (one whose current state is among
	// its own UniqueStates) is not inserted; its result carries the holder
	// and Duplicate set.
	JobInsertMany(ctx context.Context, p *JobInsertManyParams) (*JobInsertManyResult, error)
	// JobFetch locks up to Limit available jobs of the given queue and kinds,
	// ordered by priority, run time and id, and moves them to running under a
	// new lease: the attempt and the lease epoch are both incremented.
	JobFetch(ctx context.Context, p *JobFetchParams) (*JobFetchResult, error)
	// JobExtendLease moves the lease deadline of running jobs whose epoch
	// still matches; the result lists those it extended, and among them
	// those an operator asked to cancel, so every worker learns of a
	// cancel within one heartbeat.
	JobExtendLease(ctx context.Context, p *JobExtendLeaseParams) (*JobExtendLeaseResult, error)
	// JobCancelRequested reports which of the leases, still running under
	// their epoch, an operator asked to cancel, without writing: one
	// primary-key lookup per lease. A worker on a store with no
	// CancelListener asks it twice a second while it runs jobs, so a
	// cancel reaches the handler at once, not at the next heartbeat.
	JobCancelRequested(ctx context.Context, p *JobCancelRequestedParams) (*JobCancelRequestedResult, error)
	// JobFinish records outcomes of running jobs, each guarded by state
	// running and the caller's epoch, so a worker whose lease was lost never
	// overwrites the newer holder's outcome. Markers attached to outcomes are
	// claimed in the same transaction whether or not the guard matched,
	// because the effect they stand for has happened. An outcome holding a
	// value the database cannot store fails the call with an error
	// wrapping ErrUnstorable, writing none of the batch.
	JobFinish(ctx context.Context, p *JobFinishParams) (*JobFinishResult, error)
	// JobRescue makes running jobs whose lease expired before Now fetchable
	// again, or dead when they have no attempts left, or cancelled when an
	// operator asked to cancel them (their worker is gone; a cancelled job
	// is never run again).
	JobRescue(ctx context.Context, p *JobRescueParams) (*JobRescueResult, error)
	// JobGet returns one job or ErrNotFound.
	JobGet(ctx context.Context, p *JobGetParams) (*twicetype.JobRow, error)
	// JobList lists jobs matching a filter, newest first, keyset-paginated.
	JobList(ctx context.Context, p *JobListParams) (*JobListResult, error)
	// JobCount counts jobs by state, queue and kind.
	JobCount(ctx context.Context, p *JobCountParams) (*JobCountResult, error)
	// JobRetry moves dead, discarded or cancelled jobs back to available
	// with their attempts reset and their error history kept. A job whose
	// unique key another job holds (see JobInsertParams.UniqueStates) is
	// left alone with a JobActionConflict result; the others are retried
	// all the same.
	JobRetry(ctx context.Context, p *JobBulkParams) (*JobBulkResult, error)
	// JobDiscard moves dead jobs to discarded. It never takes a unique key:
	// UniqueStates with discarded have dead too, so a discarded job held
	// its key already while dead.
	JobDiscard(ctx context.Context, p *JobBulkParams) (*JobBulkResult, error)
	// JobCancel cancels jobs. An available job (due or scheduled) becomes
	// cancelled at once, finished at Now, with the request recorded as its
	// Cancel and its Note. A running job gets the request recorded and
	// keeps running: its worker learns of it (JobExtendLease, or a
	// CancelListener) and ends the attempt, as cancelled, through
	// JobFinish; if it finished first, the cancel changed nothing. A
	// finished job is left alone (JobActionAlreadyFinished).
	JobCancel(ctx context.Context, p *JobCancelParams) (*JobBulkResult, error)
	// JobDelete deletes jobs that are not running; a running job is
	// refused (JobActionWrongState), since its worker still holds it:
	// cancel it first.
	JobDelete(ctx context.Context, p *JobBulkParams) (*JobBulkResult, error)
	// JobDeleteFinished deletes up to Limit finished jobs whose FinishedAt
	// is before the cut-off of their state, lowest ids first, in short
	// statements; a zero cut-off keeps that state's jobs and a zero Limit
	// deletes nothing. A call looks at no more than
	// DeleteFinishedWindow(Limit) of each state's oldest rows. Unfinished
	// jobs are never deleted.
	JobDeleteFinished(ctx context.Context, p *JobDeleteFinishedParams) (*JobDeleteFinishedResult, error)
	// JobOrphans lists kinds with available jobs that no node whose
	// heartbeat is at or after AliveSince handles.
	JobOrphans(ctx context.Context, p *JobOrphansParams) (*JobOrphansResult, error)
	// JobThroughput counts the jobs that finished completed or dead at or
	// after Since and before Until, in buckets of Bucket counted from
	// Since, for the dashboard's chart.
	JobThroughput(ctx context.Context, p *JobThroughputParams) (*JobThroughputResult, error)
	// JobQueueStats reports, per queue with available jobs, how many are
	// due at Now and how long the oldest due one has waited: the queue
	// depth and age metrics.
	JobQueueStats(ctx context.Context, p *JobQueueStatsParams) (*JobQueueStatsResult, error)

	// Queues: pause and resume them cluster-wide, list them, and find the
	// ones no node works.

	// QueuePause pauses a queue on every node, replacing an earlier pause
	// of it: JobFetch leases none of its jobs until QueueResume, or until
	// Until when set. Jobs already running go on; waiting jobs keep their
	// attempts. A queue need not have jobs to be paused.
	QueuePause(ctx context.Context, p *QueuePauseParams) error
	// QueueResume lifts a queue's pause; Resumed is false when none was in
	// force.
	QueueResume(ctx context.Context, p *QueueResumeParams) (*QueueResumeResult, error)
	// QueueList lists every queue known from its unfinished jobs, a pause
	// (even one run out) or a node that works it, by name, with its pause
	// and its due, scheduled and running jobs. A queue that only finished
	// jobs name is not listed: finding those would read the whole history.
	QueueList(ctx context.Context, p *QueueListParams) (*QueueListResult, error)
	// QueueStranded lists queues with available jobs that no node whose
	// heartbeat is at or after AliveSince lists among the queues it works.
	QueueStranded(ctx context.Context, p *QueueStrandedParams) (*QueueStrandedResult, error)

	// MarkerPeek reports whether handler has processed key, without writing.
	MarkerPeek(ctx context.Context, p *MarkerParams) (*MarkerPeekResult, error)
	// MarkerClaim records that handler processed key. A second claim of the
	// same pair reports AlreadyProcessed; it is never an error.
	MarkerClaim(ctx context.Context, p *MarkerParams) (*MarkerClaimResult, error)
	// MarkerRelease deletes a claim, so a retry can run the effect again.
	MarkerRelease(ctx context.Context, p *MarkerParams) error
	// MarkerPrune deletes up to Limit markers processed before Before.
	MarkerPrune(ctx context.Context, p *MarkerPruneParams) (*MarkerPruneResult, error)
	// StepExecutor: named steps' markers with receipts, and job output.
	StepExecutor

	// ToggleSet stores a kill switch, replacing the one for the same kind
	// (compared case-insensitively; stored lower-cased), and appends the
	// change to the switch history in the same transaction.
	ToggleSet(ctx context.Context, p *ToggleSetParams) error
	// ToggleDelete removes the stored kill switch of a kind, if any, so the
	// kind falls back to its other sources and its registration default,
	// and appends the change to the switch history in the same
	// transaction (a delete of no switch too: none to none).
	ToggleDelete(ctx context.Context, p *ToggleDeleteParams) error
	// ToggleList lists the stored kill switches that have not expired at
	// Now, by kind. An expired switch is left out, as if it were absent,
	// so every reader (the kill-switch loader, the CLI, the dashboard)
	// sees the same switches without checking expiry itself.
	ToggleList(ctx context.Context, p *ToggleListParams) (*ToggleListResult, error)
	// ToggleHistory lists the switch history of a kind (every kind when
	// Kind is empty), newest first, keyset-paginated.
	ToggleHistory(ctx context.Context, p *ToggleHistoryParams) (*ToggleHistoryResult, error)

	// ScheduleTick records tick TickAt of a recurring schedule, and
	// enqueues its job (when Job is set) in the same transaction, only if
	// no scheduler recorded this tick or a later one before: however many
	// nodes run the scheduler, one tick becomes at most one job. Fired
	// reports whether this call won the tick.
	ScheduleTick(ctx context.Context, p *ScheduleTickParams) (*ScheduleTickResult, error)
	// ScheduleList lists the recorded schedules by name.
	ScheduleList(ctx context.Context, p *ScheduleListParams) (*ScheduleListResult, error)
	// ScheduleTicks lists a schedule's recorded ticks, newest first. A
	// store keeps the newest ScheduleTicksKept ticks of each schedule.
	ScheduleTicks(ctx context.Context, p *ScheduleTicksParams) (*ScheduleTicksResult, error)
	// ScheduleRemove deletes a recorded schedule and its ticks (a schedule
	// removed from code stays in the store until removed), or returns
	// ErrNotFound. A scheduler that still runs the schedule records it
	// again at its next tick.
	ScheduleRemove(ctx context.Context, p *ScheduleRemoveParams) error

	// CatalogPublish records the kinds a node handles in the kind catalog,
	// replacing what any node published before for each of them: the last
	// call wins, so after a rolling deploy the new shape of a kind stands
	// once the new nodes publish — except for the sensitive flags a recent
	// publish set (KeepSensitiveSince, merged by MergeCatalogArgs). Nodes
	// call it with their heartbeat.
	CatalogPublish(ctx context.Context, p *CatalogPublishParams) error
	// CatalogList lists every kind ever published, by kind, including those
	// whose node has stopped (their LastSeen tells how stale they are).
	CatalogList(ctx context.Context, p *CatalogListParams) (*CatalogListResult, error)

	// IdempotencyBegin takes a request's idempotency key, atomically: a
	// key never seen (or expired) is taken for this request (Taken); a key
	// whose record is done is returned for replay; a key still held by a
	// running request is returned as is, unless its lock is older than
	// StaleAfter and the record's fingerprint is this request's, when this
	// request takes it over (Taken). A different request never takes a
	// key over: the key stays its first request's until it completes,
	// is released or expires. The caller compares fingerprints.
	IdempotencyBegin(ctx context.Context, p *IdempotencyBeginParams) (*IdempotencyBeginResult, error)
	// IdempotencyExtend refreshes the lock of a request that is still
	// running, as a job's lease is extended, so that a request outliving
	// StaleAfter is not taken for crashed. It acts only while the caller's
	// lock (LockedAt) holds the key, else it fails with ErrNotFound (the
	// record is done, released, expired or taken over). The result's
	// LockedAt is the caller's lock from then on.
	IdempotencyExtend(ctx context.Context, p *IdempotencyExtendParams) (*IdempotencyExtendResult, error)
	// IdempotencyComplete stores the response of the request that took the
	// key.
	IdempotencyComplete(ctx context.Context, p *IdempotencyCompleteParams) error
	// IdempotencyRelease gives a taken key back (the request failed before
	// it had a response worth keeping), so a retry runs again.
	IdempotencyRelease(ctx context.Context, p *IdempotencyKeyParams) error
	// IdempotencyPrune deletes up to Limit records that expired before
	// Before.
	IdempotencyPrune(ctx context.Context, p *IdempotencyPruneParams) (*IdempotencyPruneResult, error)

	// LimitList reports, for each kind of Limits, its usage: running jobs
	// (the slots in use), due jobs, and the due jobs the limits hold back
	// (throttled, waiting for a slot).
	LimitList(ctx context.Context, p *LimitListParams) (*LimitListResult, error)

	// NodeHeartbeat records that a worker node is alive and what it handles.
	NodeHeartbeat(ctx context.Context, p *NodeHeartbeatParams) error
	// NodeList lists nodes whose heartbeat is at or after AliveSince.
	NodeList(ctx context.Context, p *NodeListParams) ([]*twicetype.Node, error)
	// NodeRemove forgets a node that stopped cleanly.
	NodeRemove(ctx context.Context, p *NodeRemoveParams) error

	// Composer: workflows and batches (see compose.go).
	Composer
	// Pruner: what retention deletes besides jobs (see retention.go).
	Pruner
}

// Store is a driver's handle on one database.
type Store interface {
	Executor
	// Begin starts a transaction owned by twice.
	Begin(ctx context.Context) (Tx, error)
	// ExecutorFromTx wraps a transaction the caller began on the same
	// database (for SQLite, a *sql.Tx), so jobs commit with the caller's
	// own writes. It returns ErrWrongTx for a type it does not take.
	ExecutorFromTx(tx any) (Executor, error)
	// Migrate applies the embedded migrations that are not applied yet.
	// It is safe to run concurrently and repeatedly.
	Migrate(ctx context.Context) error
	// SchemaVersion reports the applied and the binary's latest migration.
	SchemaVersion(ctx context.Context) (applied, latest int, err error)
	// Ping fails when the database cannot be reached.
	Ping(ctx context.Context) error
	// Close releases what Open acquired.
	Close() error
}

// Tx is a transaction twice began.
type Tx interface {
	Executor
	// Unwrap returns the driver's own transaction (for SQLite, a *sql.Tx),
	// for handlers that write their effect in it.
	Unwrap() any
	Commit(ctx context.Context) error
	Rollback(ctx context.Context) error
}

// InsertListener is implemented by stores that can wake workers in every
// process when jobs are inserted (PostgreSQL's LISTEN/NOTIFY). A wake-up is
// a hint: the worker still fetches from the database, and polls on a timer
// for what a lost notification would have told it.
type InsertListener interface {
	// ListenInserts calls notify with the queue name whenever jobs were
	// inserted into that queue (by any process), until ctx is done. It
	// reconnects by itself after a lost connection, and returns only when
	// ctx is done, with ctx's error.
	ListenInserts(ctx context.Context, notify func(queue string)) error
}

// CancelListener is implemented by stores that can tell every process at
// once that an operator asked to cancel a running job (PostgreSQL's
// LISTEN/NOTIFY). Workers still learn of cancels from JobExtendLease on
// every heartbeat; this only makes a cancel arrive sooner.
type CancelListener interface {
	// ListenCancels calls notify with the job's id whenever JobCancel
	// records a cancel request for a running job (in any process), until
	// ctx is done, reconnecting by itself like ListenInserts; it returns
	// ctx's error. The job may run on another node: notify should look
	// the id up among its own jobs and ignore the others.
	ListenCancels(ctx context.Context, notify func(jobID int64)) error
}

// MarkerBatchPeeker is implemented by stores that answer many marker peeks
// in one round trip. When its store has it (found through wrappers, see
// As), the runtime asks each fetch to peek the markers of the ClaimAfter
// jobs it leases (JobFetchParams.Peek); a job that arrives without its
// answer calls MarkerPeek, as every job does on a store without it.
type MarkerBatchPeeker interface {
	// MarkerPeekMany reports, per marker in input order, whether its
	// handler has processed its key, without writing: each answer is what
	// MarkerPeek would have said.
	MarkerPeekMany(ctx context.Context, p *MarkerPeekManyParams) (*MarkerPeekManyResult, error)
}

// ToggleListener is implemented by stores that can tell workers in every
// process at once that a kill switch was set or deleted (PostgreSQL's
// LISTEN/NOTIFY). Workers still read the switches on a timer; this only
// makes a flip arrive sooner.
type ToggleListener interface {
	// ListenToggles calls notify whenever a kill switch changes, until ctx
	// is done, reconnecting by itself; it returns ctx's error.
	ListenToggles(ctx context.Context, notify func()) error
}

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
	// State is completed, available (retry, snooze or requeue), dead or
	// cancelled.
	State twicetype.JobState
	// RunAt is when an available job may run again.
	RunAt time.Time
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
}

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
// state guard (dead for discard; dead, discarded or cancelled for retry;
// not running for delete) always applies on top.
type JobBulkParams struct {
	Filter JobFilter
	Now    time.Time
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
}

// DeleteFinishedWindow is how many of a state's oldest rows (by id) one
// JobDeleteFinished batch of limit rows looks at. Drivers bound the search
// so that a round finding nothing old enough stays cheap however long the
// history is; since ids grow with time, the oldest rows are the ones due
// first.
func DeleteFinishedWindow(limit int) int { return 10 * limit }

// JobDeleteFinishedResult counts the jobs deleted.
type JobDeleteFinishedResult struct {
	Deleted int
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

// JobQueueStatsParams give the time jobs are due by.
type JobQueueStatsParams struct {
	Now time.Time
}

// QueueStat describes one queue's waiting jobs.
type QueueStat struct {
	Queue string
	// Due counts available jobs whose RunAt is at or before Now.
	Due int
	// Scheduled counts available jobs due later (delays, retry backoffs,
	// snoozes).
	Scheduled int
	// OldestDue is the earliest RunAt of the due jobs; zero when none is
	// due.
	OldestDue time.Time
	// Paused reports the queue paused at Now (QueuePause): its due jobs
	// wait on purpose, so their age is no sign of trouble.
	Paused bool
}

// JobQueueStatsResult holds one stat per queue with available jobs, by
// queue name.
type JobQueueStatsResult struct {
	Queues []QueueStat
}

// QueuePauseParams name the queue to pause and say who asks, why, and
// until when.
type QueuePauseParams struct {
	Queue string
	// Until ends the pause by itself; zero pauses until QueueResume.
	Until  time.Time
	By     string
	Reason string
	// Now is when the pause starts; zero is the current time.
	Now time.Time
}

// Validate refuses a pause with no queue or one that would end before it
// starts; drivers call it first.
func (p *QueuePauseParams) Validate() error {
	now := p.Now
	if now.IsZero() {
		now = time.Now()
	}
	switch {
	case p.Queue == "":
		return errors.New("pause queue: no queue named")
	case !p.Until.IsZero() && !p.Until.After(now):
		return fmt.Errorf("pause queue %q: until %s is not in the future: give a later time, or none to pause until resumed",
			p.Queue, p.Until.UTC().Format(time.RFC3339))
	}
	return nil
}

// QueueResumeParams name the queue to resume.
type QueueResumeParams struct {
	Queue string
	// Now tells a pause in force from one whose Until has passed; zero is
	// the current time.
	Now time.Time
}

// QueueResumeResult tells whether a pause was lifted.
type QueueResumeResult struct {
	// Resumed is false when the queue was not paused (or its pause had
	// run out).
	Resumed bool
}

// QueueListParams give the time jobs are due by and pauses are judged at.
type QueueListParams struct {
	Now time.Time // zero is the current time
}

// QueueListResult holds the queues, ordered by name's bytes.
type QueueListResult struct {
	Queues []twicetype.QueueInfo
}

// QueueStrandedParams define which nodes count as alive.
type QueueStrandedParams struct {
	AliveSince time.Time
}

// QueueStrandedResult lists the stranded queues, by name.
type QueueStrandedResult struct {
	Queues []twicetype.StrandedQueue
}

// MarkerParams name one marker.
type MarkerParams struct {
	Handler string
	Key     string
	Now     time.Time // when claiming: the processed time to record
	// JobID and Epoch, when claiming, name the delivery making the claim
	// (the job and its lease epoch). They are recorded so that a later
	// delivery of the same job can tell its own interrupted claim from
	// another message's; zero records no claimant.
	JobID int64
	Epoch int64
}

// MarkerPeekResult answers a peek.
type MarkerPeekResult struct {
	Processed bool
	// Marker is the claim found, when Processed.
	Marker *twicetype.Marker
}

// MarkerPeekManyParams name the markers to peek; Now is not used.
type MarkerPeekManyParams struct {
	Markers []MarkerParams
}

// MarkerPeekManyResult answers each peek, in input order.
type MarkerPeekManyResult struct {
	Processed []bool
}

// MarkerClaimResult answers a claim.
type MarkerClaimResult struct {
	AlreadyProcessed bool
	// Existing is the claim that was already there, when AlreadyProcessed.
	Existing *twicetype.Marker
}

// MarkerPruneParams select old markers.
type MarkerPruneParams struct {
	Before time.Time
	Limit  int
}

// MarkerPruneResult counts the markers deleted.
type MarkerPruneResult struct {
	Deleted int
}

// ToggleSetParams carry the kill switch to store. A zero Toggle.At is the
// current time; Toggle.ExpiresAt, when set, is when the switch stops
// counting. The store keeps an expiry that is already past (refusing it is
// the caller's business): the switch is then absent from ToggleList at
// once, and the history records the set.
type ToggleSetParams struct {
	Toggle twicetype.Toggle
	// Source is recorded in the switch history; empty records
	// twicetype.ToggleSourceStore.
	Source string
}

// ToggleDeleteParams name the kind whose kill switch is removed, and who
// removes it and why, for the switch history.
type ToggleDeleteParams struct {
	Kind   string
	By     string
	Reason string
	// Source is recorded in the switch history; empty records
	// twicetype.ToggleSourceStore.
	Source string
	// At is when the switch was removed; zero is the current time.
	At time.Time
}

// ToggleListParams give the time switches are judged expired at.
type ToggleListParams struct {
	// Now leaves out the switches whose ExpiresAt is at or before it; zero
	// is the current time.
	Now time.Time
}

// ToggleListResult holds the stored kill switches, ordered by kind.
type ToggleListResult struct {
	Toggles []twicetype.Toggle
}

// ToggleHistoryParams select and page the switch history.
type ToggleHistoryParams struct {
	// Kind is the kind whose history is listed, compared case-insensitively;
	// empty lists every kind's.
	Kind string
	// BeforeID continues a listing: only changes with a smaller id are
	// listed.
	BeforeID int64
	// Limit bounds the changes listed; zero lists them all.
	Limit int
}

// ToggleHistoryResult holds the changes, newest first.
type ToggleHistoryResult struct {
	Changes []twicetype.ToggleChange
}

// ScheduleTickParams describe one tick.
type ScheduleTickParams struct {
	Name    string
	Kind    string
	Spec    string
	TickAt  time.Time
	NextAt  time.Time
	Outcome string           // twicetype.ScheduleEnqueued or ScheduleSkipped
	Job     *JobInsertParams // the job to enqueue; nil for a skipped tick
	Now     time.Time        // UpdatedAt; zero means the current time
}

// Validate refuses the ticks a store cannot record faithfully; drivers call
// it first in ScheduleTick.
func (p *ScheduleTickParams) Validate() error {
	var err error
	switch {
	case p.Name == "":
		err = errors.New("the schedule has no name")
	case p.TickAt.IsZero():
		err = errors.New("TickAt is zero: give the tick's time from the spec")
	case p.Outcome == twicetype.ScheduleSkipped && p.Job != nil:
		err = errors.New("a skipped tick has a job: leave Job nil, or record the tick as enqueued")
	case p.Outcome != twicetype.ScheduleEnqueued && p.Outcome != twicetype.ScheduleSkipped:
		err = fmt.Errorf("outcome %q is not %q or %q", p.Outcome, twicetype.ScheduleEnqueued, twicetype.ScheduleSkipped)
	default:
		return nil
	}
	return fmt.Errorf("tick schedule %q: %w", p.Name, err)
}

// ScheduleTickResult tells whether this call recorded the tick.
type ScheduleTickResult struct {
	Fired bool
	// Job is the enqueued job when Fired and Job was given.
	Job *twicetype.JobRow
}

// ScheduleListParams are empty; they keep the method's shape.
type ScheduleListParams struct{}

// ScheduleListResult holds the schedules, ordered by name.
type ScheduleListResult struct {
	Schedules []twicetype.Schedule
}

// ScheduleTicksKept is how many of a schedule's newest ticks a store
// keeps for ScheduleTicks; ScheduleTick deletes older ones.
const ScheduleTicksKept = 20

// ScheduleTicksParams name a schedule.
type ScheduleTicksParams struct {
	Name string
	// Limit bounds the ticks listed; zero lists all that are kept.
	Limit int
}

// ScheduleTicksResult holds the ticks, newest first.
type ScheduleTicksResult struct {
	Ticks []twicetype.ScheduleTick
}

// ScheduleRemoveParams name the schedule to remove.
type ScheduleRemoveParams struct {
	Name string
}

// CatalogPublishParams carry the kinds one node handles.
type CatalogPublishParams struct {
	// Node is the publishing node's id, recorded as each kind's Node.
	Node string
	// Now is recorded as each kind's LastSeen; zero is the current time.
	Now time.Time
	// Kinds are the kinds to record; their Node and LastSeen are ignored.
	Kinds []twicetype.KindInfo
	// KeepSensitiveSince keeps the sensitive flags of recent publishes: an
	// args field that a publish at or after it marked sensitive stays
	// marked, and listed, whatever this publish says of it. During a
	// rolling deploy that tags a field sensitive, an old node's publish
	// then does not un-redact it. A kept flag keeps the time of the
	// publish that set it, so it lapses once no node has set it since.
	// Zero keeps none: this publish's flags stand.
	KeepSensitiveSince time.Time
}

// Validate refuses a publish the catalog cannot record faithfully; drivers
// call it first in CatalogPublish.
func (p *CatalogPublishParams) Validate() error {
	if p.Node == "" {
		return errors.New("publish kind catalog: the publishing node has no id")
	}
	seen := make(map[string]bool, len(p.Kinds))
	for _, k := range p.Kinds {
		switch {
		case k.Kind == "":
			return fmt.Errorf("publish kind catalog of node %q: a kind has no name", p.Node)
		case seen[k.Kind]:
			return fmt.Errorf("publish kind catalog of node %q: kind %q is listed twice", p.Node, k.Kind)
		}
		seen[k.Kind] = true
	}
	return nil
}

// CatalogListParams are empty; they keep the method's shape.
type CatalogListParams struct{}

// CatalogListResult holds the catalogued kinds, ordered by kind.
type CatalogListResult struct {
	Kinds []twicetype.KindInfo
}

// IdempotencyKeyParams name one record.
type IdempotencyKeyParams struct {
	Principal string
	Key       string
	// LockedAt, when set, is the lock the caller holds (Begin's
	// Record.LockedAt, or its last Extend's): the call then acts only
	// while that lock still holds the key, so a request whose key was
	// taken over cannot touch the newer request's record. Zero acts on the
	// record whatever holds it.
	LockedAt time.Time
}

// IdempotencyBeginParams describe the request taking a key.
type IdempotencyBeginParams struct {
	Principal   string
	Key         string
	Fingerprint string
	Now         time.Time
	// ExpiresAt is when a record made now expires.
	ExpiresAt time.Time
	// StaleAfter is how old a running request's lock must be before another
	// request may take the key over (the first one crashed).
	StaleAfter time.Duration
}

// IdempotencyBeginResult is the record as it stands after the call.
type IdempotencyBeginResult struct {
	// Taken reports that this request holds the key and must run.
	Taken  bool
	Record twicetype.IdempotencyRecord
}

// IdempotencyExtendParams name the lock to refresh.
type IdempotencyExtendParams struct {
	Principal string
	Key       string
	// LockedAt is the caller's current lock: Begin's Record.LockedAt, or
	// the LockedAt of its last Extend. Required.
	LockedAt time.Time
	// Now is the lock's new time; zero means the store's clock. The new
	// lock is always later than LockedAt (by a microsecond when Now is
	// not), so each Extend gives the holder a new identity.
	Now time.Time
}

// IdempotencyExtendResult is the refreshed lock.
type IdempotencyExtendResult struct {
	// LockedAt is the new lock, in UTC at microsecond precision: pass it
	// to the next Extend and to Complete or Release.
	LockedAt time.Time
}

// IdempotencyCompleteParams carry the response to store.
type IdempotencyCompleteParams struct {
	Principal string
	Key       string
	// LockedAt, when set, is the lock the caller holds: the response is
	// stored only while that lock still holds the key, else the call fails
	// with ErrNotFound (see IdempotencyKeyParams.LockedAt).
	LockedAt time.Time
	Status   int
	Header   map[string][]string
	Body     []byte
}

// IdempotencyPruneParams select expired records.
type IdempotencyPruneParams struct {
	Before time.Time
	Limit  int
}

// IdempotencyPruneResult counts the records deleted.
type IdempotencyPruneResult struct {
	Deleted int
}

// NodeHeartbeatParams describe a live node.
type NodeHeartbeatParams struct {
	Node *twicetype.Node
}

// NodeListParams define which nodes count as alive.
type NodeListParams struct {
	AliveSince time.Time
}

// NodeRemoveParams name a node.
type NodeRemoveParams struct {
	ID string
}
