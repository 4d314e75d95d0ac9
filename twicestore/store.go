// Package twicestore is the storage seam of twice: the interface every
// driver implements and the runtime talks to. It is for driver authors
// (twicesqlite and twicepg implement it, and so may a third driver);
// applications use the twice.Client and its admin API instead, which add
// the checks and the wording this seam leaves out. Like database/sql/driver,
// it is not meant to be called by application code, and it may change
// before twice's v1.
//
// Each method takes a context and one *XxxParams struct and returns a
// result struct; drivers map their own errors to the sentinels here, so no
// backend type crosses the seam. This file holds the interfaces (Executor,
// Store, Tx); their parameters and results are split by area, as the
// drivers and the conformance suite are: jobs.go, queues.go, markers.go,
// steps.go, toggles.go, schedules.go, catalog.go, idempotency.go, nodes.go,
// compose.go, limits.go, limit_overrides.go and retention.go.
//
// Optional capabilities (such as wake-up notifications on PostgreSQL) are
// separate interfaces that callers find by type assertion (listeners.go).
//
// The conformance suite in storetest is the full contract: its package doc
// lists the conventions these method docs leave open (zero times and
// limits, ordering, what a rescue records), and every driver must pass it
// unchanged.
package twicestore

import (
	"context"
	"errors"

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
	// JobRetry moves dead, discarded or cancelled jobs (and completed ones
	// with Completed, see JobBulkParams) back to available with their
	// attempts reset and their error history kept. A job whose
	// unique key another job holds (see JobInsertParams.UniqueStates) is
	// left alone with a JobActionConflict result; the others are retried
	// all the same.
	JobRetry(ctx context.Context, p *JobBulkParams) (*JobBulkResult, error)
	// JobDiscard moves dead jobs to discarded. It never takes a unique key:
	// UniqueStates with discarded have dead too, so a discarded job held
	// its key already while dead.
	JobDiscard(ctx context.Context, p *JobBulkParams) (*JobBulkResult, error)
	// JobRunNow makes available jobs due at Now: a scheduled job, or a
	// retry waiting out its backoff, runs at the next fetch. A job already
	// due keeps its run time (and counts as done). A job in any other
	// state is left alone (JobActionWrongState): a waiting job waits for
	// its signal, not for a time.
	JobRunNow(ctx context.Context, p *JobBulkParams) (*JobBulkResult, error)
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
	// WaitExecutor: durable waits' signals and timers.
	WaitExecutor
	// Replayer: what a retry would do, read in bulk, and a forced
	// retry's record (replay.go).
	Replayer

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
	// LimitOverrider: runtime overrides of limits and queue concurrency,
	// with their history (limit_overrides.go).
	LimitOverrider

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
