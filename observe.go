package twice

import (
	"time"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// EventType says what happened to a job, for an Observer.
type EventType int

// The events an Observer is told about.
const (
	// EventEnqueued: a job was inserted (a unique-key duplicate is not).
	// Jobs enqueued in a transaction count when inserted, even if the
	// transaction later rolls back.
	EventEnqueued EventType = iota + 1
	// EventStarted: an attempt started, past the kill switch.
	EventStarted
	// EventCompleted: a job completed, a no-op included.
	EventCompleted
	// EventRetried: an attempt failed and the job will run again.
	EventRetried
	// EventDead: a job was dead-lettered.
	EventDead
	// EventSkipped: a job was held, or a recurring tick skipped, because
	// its kind is switched off.
	EventSkipped
	// EventDuplicate: the marker absorbed a delivery, already processed,
	// which completed as a no-op without its effect.
	EventDuplicate
	// EventCancelled: a running job ended cancelled, by an operator's
	// cancel or by its handler returning Cancel.
	EventCancelled
	// EventFenced: the lease fence refused an attempt's outcome: the job
	// had left the attempt's lease (rescued, taken by another worker).
	EventFenced
)

// String names the event type.
func (t EventType) String() string {
	switch t {
	case EventEnqueued:
		return "enqueued"
	case EventStarted:
		return "started"
	case EventCompleted:
		return "completed"
	case EventRetried:
		return "retried"
	case EventDead:
		return "dead"
	case EventSkipped:
		return "skipped"
	case EventDuplicate:
		return "duplicate"
	case EventCancelled:
		return "cancelled"
	case EventFenced:
		return "fenced"
	}
	return "unknown"
}

// Event is one thing that happened to a job.
type Event struct {
	// Type says what happened.
	Type EventType
	// Kind and Queue are the job's.
	Kind  string
	Queue string
	// Wait is set on the EventStarted of a job's first attempt: how long it
	// waited from when it was due (enqueued, or its delay over) to start.
	Wait time.Duration
	// Run is set on EventCompleted, EventRetried, EventDead and
	// EventCancelled: how long the attempt ran.
	Run time.Duration
	// FirstStart reports, on EventStarted, that this is the job's first
	// attempt, so Wait is meaningful.
	FirstStart bool
	// SinceFetch is set on EventStarted: how long from the start of the
	// fetch that leased the job to the attempt's start, every attempt.
	// It is the fetch's round trip and the wait for a worker to take the
	// job up; one that grows means the node leases jobs faster than it
	// starts them, and the lease runs down before the handler runs.
	SinceFetch time.Duration
}

// Observer is told what happens to jobs, for metrics (twicemetrics
// implements it for Prometheus). Observe is called on the runtime's hot
// paths: it must be quick and must not block.
type Observer interface {
	Observe(Event)
}

// ObserverFunc adapts a function to an Observer.
type ObserverFunc func(Event)

// Observe calls f.
func (f ObserverFunc) Observe(e Event) { f(e) }

func (c *Client) observe(t EventType, row *twicetype.JobRow) {
	observe(c.cfg.Observer, t, row)
}

func observe(o Observer, t EventType, row *twicetype.JobRow) {
	if o != nil {
		o.Observe(Event{Type: t, Kind: row.Kind, Queue: row.Queue})
	}
}

// observeSkippedTick reports a recurring tick skipped because its kind is
// switched off, in the queue its job would have gone to.
func (c *Client) observeSkippedTick(kind string, opts *EnqueueOpts) {
	if c.cfg.Observer == nil {
		return
	}
	var queue string
	if opts != nil {
		queue = opts.Queue
	}
	c.cfg.Observer.Observe(Event{Type: EventSkipped, Kind: kind, Queue: c.queueFor(kind, queue)})
}

// observeInserted reports the jobs an insert stored.
func (c *Client) observeInserted(res *twicestore.JobInsertManyResult) {
	if c.cfg.Observer == nil {
		return
	}
	for _, r := range res.Jobs {
		if !r.Duplicate {
			c.observe(EventEnqueued, r.Job)
		}
	}
}

func (x *executor) observe(t EventType, row *twicetype.JobRow) {
	observe(x.cfg.Observer, t, row)
}

// observeStart reports an attempt's start at now (the executor's clock),
// of a job leased by a fetch that began at fetchedAt (the wall clock the
// producer reads; zero when not known).
func (x *executor) observeStart(row *twicetype.JobRow, fetchedAt, now time.Time) {
	if x.cfg.Observer == nil {
		return
	}
	e := Event{Type: EventStarted, Kind: row.Kind, Queue: row.Queue, FirstStart: row.Attempt == 1}
	if !fetchedAt.IsZero() {
		e.SinceFetch = max(time.Since(fetchedAt), 0)
	}
	if e.FirstStart {
		e.Wait = max(now.Sub(row.RunAt), 0)
	}
	x.cfg.Observer.Observe(e)
}

// observeOutcome reports a recorded outcome of an attempt that started at
// start: failed tells a retry (an error recorded) from a snooze or a
// shutdown requeue, which are neither a result nor a failure.
func (x *executor) observeOutcome(row *twicetype.JobRow, state twicetype.JobState, failed bool, start time.Time) {
	if x.cfg.Observer == nil {
		return
	}
	e := Event{Kind: row.Kind, Queue: row.Queue, Run: x.now().Sub(start)}
	switch {
	case state == twicetype.JobStateCompleted:
		e.Type = EventCompleted
	case state == twicetype.JobStateDead:
		e.Type = EventDead
	case state == twicetype.JobStateCancelled:
		e.Type = EventCancelled
	case failed:
		e.Type = EventRetried
	default:
		return
	}
	x.cfg.Observer.Observe(e)
}
