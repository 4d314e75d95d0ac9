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
	// JobStateCompleted is a job that finished successfully (including a no-op).
	JobStateCompleted JobState = "completed"
	// JobStateDead is a job in the dead-letter queue, waiting for a human.
	JobStateDead JobState = "dead"
	// JobStateDiscarded is a dead job a human decided not to retry.
	JobStateDiscarded JobState = "discarded"
)

// Finished reports whether the state is terminal.
func (s JobState) Finished() bool {
	return s == JobStateCompleted || s == JobStateDead || s == JobStateDiscarded
}

// Valid reports whether s is one of the known states.
func (s JobState) Valid() bool {
	switch s {
	case JobStateAvailable, JobStateRunning, JobStateCompleted, JobStateDead, JobStateDiscarded:
		return true
	}
	return false
}

// AllJobStates lists every state in life-cycle order.
var AllJobStates = []JobState{JobStateAvailable, JobStateRunning, JobStateCompleted, JobStateDead, JobStateDiscarded}

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
