// Package twicetype holds the row and state types shared by the root package,
// the storage seam and the drivers. It depends on the standard library only,
// which is what lets every other package import it without cycles.
package twicetype

import "time"

// JobState is where a job is in its life.
type JobState string

// The states a job moves through. A job waiting for its run time (a delay, a
// retry backoff or a snooze) is available with a future RunAt; fetching only
// takes available jobs whose RunAt has passed.
const (
	// JobStateAvailable is a job waiting to be fetched once RunAt has passed.
	JobStateAvailable JobState = "available"
	// JobStateRunning is a job a worker holds under a lease.
	JobStateRunning JobState = "running"
	// JobStateWaiting is a job its handler parked until a signal of the
	// name in WaitName arrives or its timer (RunAt) fires. It holds no
	// lease and no concurrency slot, and spent no attempt on the park.
	JobStateWaiting JobState = "waiting"
	// JobStateCompleted is a job that finished successfully (including a no-op).
	JobStateCompleted JobState = "completed"
	// JobStateDead is a job in the dead-letter queue, waiting for a human.
	JobStateDead JobState = "dead"
	// JobStateDiscarded is a dead job a human decided not to retry.
	JobStateDiscarded JobState = "discarded"
	// JobStateCancelled is a job stopped on purpose before it completed:
	// by an operator (JobCancel) or by its own handler. Unlike a dead job
	// it waits for no human; like a discarded one it is kept for the
	// retention period and can still be retried by hand.
	JobStateCancelled JobState = "cancelled"
)

// Finished reports whether the state is terminal.
func (s JobState) Finished() bool {
	switch s {
	case JobStateCompleted, JobStateDead, JobStateDiscarded, JobStateCancelled:
		return true
	}
	return false
}

// Valid reports whether s is one of the known states.
func (s JobState) Valid() bool {
	switch s {
	case JobStateAvailable, JobStateRunning, JobStateWaiting, JobStateCompleted, JobStateDead, JobStateDiscarded,
		JobStateCancelled:
		return true
	}
	return false
}

// AllJobStates lists every state in life-cycle order.
var AllJobStates = []JobState{JobStateAvailable, JobStateRunning, JobStateWaiting, JobStateCompleted,
	JobStateDead, JobStateDiscarded, JobStateCancelled}

// JobRow is a job as the store holds it.
type JobRow struct {
	ID            int64
	Kind          string
	Queue         string
	Priority      int
	Args          []byte // the encoded payload (JSON)
	MessageID     string // UUID for transport dedup
	Key           string // the idempotency key markers are claimed under
	CorrelationID string
	UniqueKey     string // empty when the job was not enqueued unique
	State         JobState
	Attempt       int   // attempts started so far, including the running one
	MaxAttempts   int   // attempts allowed before the job is dead-lettered
	Epoch         int64 // lease epoch: the fencing token, bumped on every fetch
	RunAt         time.Time
	LeaseUntil    time.Time // zero unless running
	AttemptedBy   string    // node that holds (or last held) the lease
	Errors        []AttemptError
	Note          string // why a job finished as it did, e.g. a no-op reason
	CreatedAt     time.Time
	FinishedAt    time.Time // zero until the job reaches a terminal state
	// Metadata is what the system carries from the enqueuer to the handler
	// beside the args, such as the trace context; nil when there is none.
	Metadata map[string]string
	// Snoozes counts the attempts that ended in a snooze (which give their
	// attempt back), so a job that snoozes forever can be stopped; a retry
	// by hand resets it.
	Snoozes int
	// Cancel is the cancel an operator asked for, nil when none was. A
	// running job keeps running until its worker ends it (as cancelled, or
	// otherwise if it finished first); a job cancelled before it ran is
	// cancelled at once and carries the request as the record of who and
	// why.
	Cancel *CancelRequest
	// Trace is the trace context (a W3C traceparent) of the job's last
	// attempt whose outcome was written, so the next attempt's span links
	// to it; before a workflow task's first attempt, those of the tasks
	// whose completion released it, comma separated. Empty when no
	// twice.Tracer was set.
	Trace string
	// WaitName is the name of the signal a waiting job waits for (a
	// sleep waits under its own name); empty when the job never parked.
	// It is kept after the wake, as the last wait the job parked on.
	WaitName string
	// SignalSeq counts the signals delivered to the job and the timers
	// that fired for it. A park carries the count its delivery was
	// fetched with: one that grew since makes the job available at once
	// instead of waiting, so a signal sent while the handler decided to
	// park is never lost.
	SignalSeq int64
}

// CancelRequest records who asked to cancel a job, when and why.
type CancelRequest struct {
	At     time.Time
	By     string // who (user@host for the CLI)
	Reason string // why, as the operator typed it
}

// Note is how a cancel reads in a job's Note: "cancelled by BY: REASON".
func (c *CancelRequest) Note() string {
	n := "cancelled"
	if c.By != "" {
		n += " by " + c.By
	}
	if c.Reason != "" {
		n += ": " + c.Reason
	}
	return n
}

// AttemptError records one failed attempt.
type AttemptError struct {
	Attempt int       `json:"attempt"`
	At      time.Time `json:"at"`
	Error   string    `json:"error"`
	Stack   string    `json:"stack,omitempty"`
}

// Marker is one processed-message record: handler HandlerName has applied
// the effect for idempotency key Key.
type Marker struct {
	Handler     string
	Key         string
	ProcessedAt time.Time
	// JobID and Epoch name the delivery that claimed it: the job and its
	// lease epoch. Both are zero for a claim that recorded no claimant.
	JobID int64
	Epoch int64
}

// Node is a worker process as it last reported itself.
type Node struct {
	ID          string
	Host        string
	PID         int
	Kinds       []string
	Queues      []string
	StartedAt   time.Time
	HeartbeatAt time.Time
}

// QueueInfo is one queue as an operator sees it: whether it is paused, and
// what waits and runs in it.
type QueueInfo struct {
	Name string
	// Paused reports a pause in force: set, with no Until or an Until
	// still ahead. A pause whose Until has passed is over and is not
	// reported (its row may linger until the queue is resumed or paused
	// again).
	Paused   bool
	PausedAt time.Time // zero unless Paused
	Until    time.Time // zero: paused until resumed
	By       string    // who paused it
	Reason   string    // why
	// Due counts available jobs whose RunAt has passed: what a worker
	// would fetch now, were the queue not paused.
	Due int
	// Scheduled counts available jobs due later (delays, retry backoffs,
	// snoozes).
	Scheduled int
	// Running counts jobs held under a lease.
	Running int
}

// StrandedQueue is a queue with available jobs that no live node works:
// unlike an orphaned kind, a worker may know the kind, but none fetches from
// the queue, so its jobs wait forever.
type StrandedQueue struct {
	Queue  string
	Count  int       // available jobs
	Oldest time.Time // the earliest CreatedAt among them
}

// OrphanKind is a kind with queued jobs that no live worker handles.
type OrphanKind struct {
	Kind   string
	Queue  string
	Count  int
	Oldest time.Time
}

// Toggle is a kill switch set in the store (from the CLI or the dashboard):
// it turns one job kind on or off on every node.
type Toggle struct {
	Kind    string // lower-cased: toggle keys are case-insensitive
	Enabled bool
	Reason  string // why, as the operator typed it
	By      string // who (user@host for the CLI)
	At      time.Time
	// ExpiresAt, when set, is when the switch stops counting: from then on
	// the store treats it as absent, and the kind follows its other
	// sources and its registration default again. Zero never expires.
	ExpiresAt time.Time
}

// Schedule is a recurring job's state as the store keeps it: its last tick
// and what became of it, shared by every node's scheduler.
type Schedule struct {
	Name        string
	Kind        string
	Spec        string
	LastTickAt  time.Time // the tick time (from the spec), not when it ran
	LastOutcome string    // ScheduleEnqueued or ScheduleSkipped
	LastJobID   int64     // the job the last tick enqueued; 0 when skipped
	NextAt      time.Time // the tick after LastTickAt
	UpdatedAt   time.Time
}

// ScheduleTick is one recorded tick of a recurring schedule.
type ScheduleTick struct {
	Name       string
	TickAt     time.Time // the tick's time from the spec
	Outcome    string    // ScheduleEnqueued or ScheduleSkipped
	JobID      int64     // the job the tick enqueued; 0 when skipped
	RecordedAt time.Time // when a scheduler recorded it
}

// What became of a schedule's tick.
const (
	// ScheduleEnqueued: the tick enqueued its job.
	ScheduleEnqueued = "enqueued"
	// ScheduleSkipped: the kind's kill switch was off; nothing was enqueued.
	ScheduleSkipped = "skipped"
)

// IdempotencyRecord is a request-level idempotency record (the HTTP
// Idempotency-Key header): the first request with a key runs, and its
// response is kept so a retry with the same key gets the same answer.
type IdempotencyRecord struct {
	Principal   string // whose key it is: keys of two principals never meet
	Key         string
	Fingerprint string // of the request (method, path, body)
	Done        bool   // the response is stored; false while the first request runs
	Status      int
	Header      map[string][]string
	Body        []byte
	LockedAt    time.Time // when the running request took the key
	CreatedAt   time.Time
	ExpiresAt   time.Time
}
