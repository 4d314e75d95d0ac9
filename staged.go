package twice

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// markFailedTimeout bounds MarkFailed, which runs on a context the job's
// cancellation cannot reach.
const markFailedTimeout = 30 * time.Second

// Staged is the handler shape of jobs that work on one row: load it, work
// on it, and mark it failed when the last attempt fails, so the row never
// stays "processing" forever while its job sits in the dead-letter queue.
// R is what Load returns (the row).
type Staged[T Args, R any] struct {
	// Load fetches what the job works on. found false means it is gone
	// (swept, deleted): the job completes as a no-op, not a failure.
	Load func(ctx context.Context, job *Job[T]) (row R, found bool, err error)
	// Work does the job.
	Work func(ctx context.Context, job *Job[T], row R) error
	// MarkFailed, if set, records the failure on the row. It runs when a
	// failure dead-letters the job (its final attempt, or a Permanent
	// error), before the job is dead-lettered, on a context that the job's
	// cancellation cannot reach. It never runs for a shutdown, which puts
	// the job back, or for a retry.
	MarkFailed func(ctx context.Context, job *Job[T], row R, cause error) error
}

// Run implements Handler.
func (s Staged[T, R]) Run(ctx context.Context, job *Job[T]) error {
	row, found, err := s.Load(ctx, job)
	if err != nil {
		return fmt.Errorf("load: %w", err)
	}
	if !found {
		return NoOp("nothing to work on: not found (already swept?)")
	}
	err = s.Work(ctx, job, row)
	if err == nil || !s.deadLetters(ctx, job, err) {
		return err
	}
	if s.MarkFailed == nil {
		return err
	}
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), markFailedTimeout)
	defer cancel()
	if merr := s.MarkFailed(mctx, job, row, err); merr != nil {
		Logger(ctx).ErrorContext(ctx, "marking the row failed did not work; the job is dead-lettered anyway", "err", merr)
	}
	return err
}

// deadLetters reports whether err, returned by Work, sends the job to the
// dead-letter queue rather than back to the queue.
func (s Staged[T, R]) deadLetters(ctx context.Context, job *Job[T], err error) bool {
	var (
		noop      *NoOpError
		snooze    *SnoozeError
		permanent *PermanentError
	)
	switch {
	case errors.As(err, &noop), errors.As(err, &snooze):
		return false
	case errors.Is(context.Cause(ctx), ErrShutdown):
		return false // put back, not failed
	case errors.Is(context.Cause(ctx), ErrLeaseLost):
		return false // another worker may hold the job now
	case errors.As(err, &permanent):
		return true
	}
	return job.FinalAttempt()
}
