package twicestore

import "context"

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

// ToggleListener is implemented by stores that can tell workers in every
// process at once that a kill switch was set or deleted (PostgreSQL's
// LISTEN/NOTIFY). Workers still read the switches on a timer; this only
// makes a flip arrive sooner. A limit override set or cleared
// (LimitOverrider) notifies it too: workers re-read both together.
type ToggleListener interface {
	// ListenToggles calls notify whenever a kill switch or a limit
	// override changes, until ctx is done, reconnecting by itself; it
	// returns ctx's error.
	ListenToggles(ctx context.Context, notify func()) error
}
