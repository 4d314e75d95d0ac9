package twice

import (
	"context"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/twicejobs/twice/twicestore"
)

// markFailedTimeout bounds MarkFailed, which runs on a context the job's
// cancellation cannot reach.
const markFailedTimeout = 30 * time.Second

// Staged is the handler shape of jobs that work on one row: load it, work
// on it, and mark it failed when the job is dead-lettered, so the row never
// stays "processing" forever while its job sits in the dead-letter queue.
// R is what Load returns (the row).
//
// MarkFailed runs when, and only when, the runtime dead-letters the job
// for a failure of Work: its final attempt failed (a panic included), Work
// returned a Permanent error, or the kind's strategy turns the failure into
// a dead letter (ClaimBefore does for any error but NotApplied). It runs
// once per dead-lettering, before the job is recorded dead, on a context
// the job's cancellation cannot reach; never for a retry, a snooze, a
// shutdown or a lost lease.
//
// With the Transactional strategy the attempt's transaction is rolled back
// first, and MarkFailed gets a transaction of its own through job.Tx,
// committed when it returns nil (a mark written in the attempt's would be
// rolled back with it).
type Staged[T Args, R any] struct {
	// Load fetches what the job works on. found false means it is gone
	// (swept, deleted): the job completes as a no-op, not a failure.
	Load func(ctx context.Context, job *Job[T]) (row R, found bool, err error)
	// Work does the job.
	Work func(ctx context.Context, job *Job[T], row R) error
	// MarkFailed, if set, records the failure on the row when the job is
	// dead-lettered (see Staged).
	MarkFailed func(ctx context.Context, job *Job[T], row R, cause error) error
}

// Run implements Handler. A panic in Work becomes a *PanicError here, so
// that a panicking final attempt still marks the row.
func (s Staged[T, R]) Run(ctx context.Context, job *Job[T]) (err error) {
	row, found, err := s.Load(ctx, job)
	if err != nil {
		return fmt.Errorf("load: %w", err)
	}
	if !found {
		return NoOp("nothing to work on: not found (already swept?)")
	}
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: string(debug.Stack())}
		}
		if err != nil && s.MarkFailed != nil {
			cause := err
			err = &markFailedError{err: cause, mark: func(ctx context.Context, tx twicestore.Tx) error {
				j := *job
				j.tx = tx
				return s.MarkFailed(ctx, &j, row, cause)
			}}
		}
	}()
	return s.Work(ctx, job, row)
}

// markFailedError carries a Staged handler's MarkFailed with the error of
// Work, to the executor, which alone knows whether the failure
// dead-letters the job and when the attempt's transaction is over. It is
// invisible otherwise: its text is the error's, and errors.As sees
// through it.
type markFailedError struct {
	err  error
	mark func(ctx context.Context, tx twicestore.Tx) error
}

func (e *markFailedError) Error() string { return e.err.Error() }
func (e *markFailedError) Unwrap() error { return e.err }
