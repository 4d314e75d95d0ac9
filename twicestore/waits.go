package twicestore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twicejobs/twice/internal/freetext"
	"github.com/twicejobs/twice/twicetype"
)

// Durable waits. A handler parks its job (a JobOutcome in state
// JobStateWaiting, with the WaitName it waits for and, in RunAt, when its
// timer fires) and the job leaves running: no lease, no slot, no attempt
// spent. JobSignal resolves a wait by name with a payload, JobWakeDue
// resolves the waits whose timer passed as timed out, and either makes a
// job waiting on that name available, in the same write. A job holds one
// resolution per name, whichever came first (twicetype.Signal), and every
// later run of its handler reads it with JobSignalGet.

// WaitNever is the RunAt a waiting job holds when its wait has no
// timeout: a park with a zero RunAt is stored with it, and JobWakeDue
// never reaches it.
var WaitNever = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)

// MaxSignalPayloadBytes caps what a signal carries: an approval and who
// gave it, a provider's callback body, an id. The root package applies
// the args policy (a smaller default cap, no secret-looking fields)
// before a payload reaches the store.
const MaxSignalPayloadBytes = 64 << 10

// ErrJobFinished means a signal was sent to a job that has finished
// (completed, dead, discarded or cancelled): nothing will read it, so it
// is refused and nothing is stored.
var ErrJobFinished = errors.New("twicestore: the job has finished; it waits for no signal")

// WaitExecutor is the part of Executor that durable waits use.
type WaitExecutor interface {
	// JobSignal resolves the wait p.Name of job p.JobID with p.Payload,
	// unless it is resolved already (by a signal of that name or by its
	// timer): then it changes nothing and returns the resolution as
	// Existing. A job that waits on p.Name becomes available at p.Now in
	// the same write (Woke). A signal for a name the job does not wait
	// on yet is stored for the wait that comes. ErrNotFound for no such
	// job, ErrJobFinished for a finished one (unless the signal is a
	// repeat of one it took: that is a duplicate, with Existing), a
	// CheckSignal error for a
	// name or payload that cannot be stored; none of them stores
	// anything. Any other resolution of the job grows its SignalSeq.
	JobSignal(ctx context.Context, p *JobSignalParams) (*JobSignalResult, error)
	// JobSignalGet returns the resolution of wait p.Name of job p.JobID,
	// or ErrNotFound when it has none yet.
	JobSignalGet(ctx context.Context, p *JobSignalGetParams) (*twicetype.Signal, error)
	// JobWakeDue resolves as timed out the waits of up to Limit waiting
	// jobs whose RunAt is at or before Now (a Limit of zero or less: all;
	// with IDs, those jobs whatever their RunAt) and makes those jobs
	// available, due from the time their timer fired (their RunAt, or Now
	// for one fired early), which the resolution records too, each in one
	// write with its resolution; a wait a signal resolved meanwhile is not
	// resolved again.
	JobWakeDue(ctx context.Context, p *JobWakeDueParams) (*JobWakeDueResult, error)
}

// JobSignalParams is one signal for one job.
type JobSignalParams struct {
	JobID int64
	// Name is the wait the signal resolves.
	Name string
	// Payload is JSON, at most MaxSignalPayloadBytes; nil is stored as
	// null.
	Payload []byte
	// Sender names who sent it (user@host for the CLI).
	Sender string
	// Now is when the signal arrived; the current time when zero.
	Now time.Time
}

// CheckSignal reports a signal that cannot be stored: no job id, a name
// missing or over freetext.MaxNameBytes, a payload over
// MaxSignalPayloadBytes, or text no driver can store (a NUL byte, bytes
// that are not UTF-8; ErrUnstorable).
func (p *JobSignalParams) CheckSignal() error {
	if p.JobID <= 0 {
		return fmt.Errorf("signal %q: a signal needs the id of the job it is for", p.Name)
	}
	if err := CheckWaitName(p.Name); err != nil {
		return err
	}
	if len(p.Payload) > MaxSignalPayloadBytes {
		return fmt.Errorf("signal %q: its payload is %d bytes, over the %d-byte limit: send an id, not the document",
			p.Name, len(p.Payload), MaxSignalPayloadBytes)
	}
	for _, f := range [...]struct{ what, text string }{{"payload", string(p.Payload)}, {"sender", p.Sender}} {
		if at := freetext.UnstorableAt(f.text); at >= 0 {
			return fmt.Errorf("signal %q: its %s holds a NUL byte or bytes that are not UTF-8 (at byte %d): %w",
				p.Name, f.what, at, ErrUnstorable)
		}
	}
	if len(p.Sender) > freetext.MaxNameBytes {
		return fmt.Errorf("signal %q: its sender is %d bytes, over the %d-byte limit", p.Name, len(p.Sender), freetext.MaxNameBytes)
	}
	return nil
}

// CheckWaitName reports a wait's name that cannot be stored: empty, over
// freetext.MaxNameBytes, or not storable text.
func CheckWaitName(name string) error {
	if name == "" {
		return errors.New("wait: a wait needs a name (the signal it waits for)")
	}
	if err := freetext.Check("wait name", name, freetext.MaxNameBytes); err != nil {
		return fmt.Errorf("%w: %w", err, ErrUnstorable)
	}
	return nil
}

// JobSignalResult says what a signal did.
type JobSignalResult struct {
	// Existing is the wait's earlier resolution when it had one: the
	// signal was a duplicate (or came after the timeout) and changed
	// nothing.
	Existing *twicetype.Signal
	// Woke reports that the job was waiting on the signal's name and is
	// now available.
	Woke bool
}

// JobSignalGetParams name one wait of one job.
type JobSignalGetParams struct {
	JobID int64
	Name  string
}

// JobWakeDueParams bound one pass of the waits' timers.
type JobWakeDueParams struct {
	Now   time.Time
	Limit int
	// IDs, when not nil, fires the timers of these waiting jobs at Now,
	// whatever their RunAt, and no other: a test that does not wait for a
	// timer, an operator who ends a wait early. A wait that has no timer
	// (WaitNever) times out too.
	IDs []int64
}

// JobWakeDueResult lists the jobs whose timer woke them.
type JobWakeDueResult struct {
	Woken []int64
}
