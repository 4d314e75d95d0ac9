package twice

import (
	"errors"
	"fmt"
	"time"

	"github.com/twicejobs/twice/internal/freetext"
)

// PermanentError marks a failure that retrying cannot fix: the job goes to
// the dead-letter queue now. Build it with Permanent.
type PermanentError struct{ Err error }

// Permanent wraps err so the job is dead-lettered without further attempts.
func Permanent(err error) error { return &PermanentError{Err: err} }

func (e *PermanentError) Error() string { return "permanent: " + errString(e.Err) }

// Unwrap returns the wrapped error.
func (e *PermanentError) Unwrap() error { return e.Err }

// MaxSnoozesDefault is how many times a job may snooze (which gives its
// attempt back) when its kind sets no KindOpts.MaxSnoozes.
const MaxSnoozesDefault = 100

// ErrTooManySnoozes is why a job that snoozed past its kind's limit
// (KindOpts.MaxSnoozes) is dead-lettered.
var ErrTooManySnoozes = errors.New("twice: job snoozed too many times")

// SnoozeError asks for the job to run again after Duration without spending
// an attempt. Build it with Snooze.
type SnoozeError struct{ Duration time.Duration }

// Snooze reschedules the job d from now without spending an attempt.
func Snooze(d time.Duration) error { return &SnoozeError{Duration: d} }

func (e *SnoozeError) Error() string { return fmt.Sprintf("snoozed for %s", e.Duration) }

// NoOpError records that the job had nothing to do (the user was deleted,
// the row already swept): it completes successfully, with the reason kept.
// Build it with NoOp.
type NoOpError struct{ Reason string }

// NoOp completes the job successfully as a skip, recording reason. An
// "already done" job is a success, not a failure: it must not page anyone.
func NoOp(reason string) error { return &NoOpError{Reason: reason} }

func (e *NoOpError) Error() string { return "no-op: " + e.Reason }

// NotAppliedError tells a ClaimBefore kind that the effect certainly did not
// happen (the provider refused the request, say), so the runtime releases
// the claim and retries instead of dead-lettering. Build it with NotApplied.
type NotAppliedError struct{ Err error }

// NotApplied wraps err to say the effect was not applied.
func NotApplied(err error) error { return &NotAppliedError{Err: err} }

func (e *NotAppliedError) Error() string { return "not applied: " + errString(e.Err) }

// Unwrap returns the wrapped error.
func (e *NotAppliedError) Unwrap() error { return e.Err }

// CancelError ends the job as cancelled: stopped on purpose, finished,
// never retried, and not a failure that needs a person (unlike Permanent,
// which dead-letters it). Build it with Cancel.
type CancelError struct{ Err error }

// Cancel ends the job as cancelled, with err as the reason kept in its
// note: the handler found that the job should not happen any more (the
// order was withdrawn, the account closed). Return it only when the effect
// did not happen: a ClaimBefore kind's claim is released, as for
// NotApplied, so a retry by hand runs the job again.
func Cancel(err error) error { return &CancelError{Err: err} }

func (e *CancelError) Error() string { return "cancelled: " + errString(e.Err) }

// Unwrap returns the wrapped error.
func (e *CancelError) Unwrap() error { return e.Err }

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// PanicError is the error a recovered handler panic becomes; its stack is
// kept in the job's error history.
type PanicError struct {
	Value any
	Stack string
}

func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

// ErrShutdown is the cause a job's context is cancelled with when Stop's
// grace runs out; the job is put back without spending an attempt.
var ErrShutdown = errors.New("twice: worker shutting down")

// ErrEffectUncertain is why a ClaimBefore job is dead-lettered when it finds
// its own claim from an earlier delivery that never recorded an outcome:
// the effect may have happened, and only a person can tell. If it did not,
// release the marker its error names (twice markers release) and retry the
// job; if it did, discard the job.
var ErrEffectUncertain = errors.New("twice: an earlier delivery claimed this job's marker and never finished, so the effect may have happened")

// ErrJobCancelled is the cause a job's context is cancelled with when an
// operator cancels the running job (Client.JobCancel): at once on
// PostgreSQL, within about half a second on SQLite. The job ends cancelled
// whatever its handler returns, and is never retried; a ClaimBefore kind's
// claim is kept unless the handler returns NotApplied or Cancel.
var ErrJobCancelled = errors.New("twice: job cancelled")

// ErrLeaseLost is the cause a job's context is cancelled with when its lease
// could not be extended: another worker may hold the job now.
var ErrLeaseLost = errors.New("twice: job lease lost")

// MaxErrorTextBytes caps each error text and stack stored with a job
// attempt (and a job's note): a longer one keeps its beginning and ends
// with a mark saying how much was cut. A NUL byte or a byte that is not
// UTF-8 in such text is stored as \xNN, the text marked "[cleaned: …]".
const MaxErrorTextBytes = 16 << 10

// storableText is s as an outcome stores it: capped at MaxErrorTextBytes,
// and with a NUL byte or bytes that are not UTF-8 (a binary response body
// in an error, say) escaped and marked, since PostgreSQL refuses them and
// an outcome it refuses would never be written (see freetext.Clean).
func storableText(s string) string { return freetext.Clean(s, MaxErrorTextBytes) }
