package twice

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/twicejobs/twice/internal/freetext"
	"github.com/twicejobs/twice/internal/logattr"
	"github.com/twicejobs/twice/twicestore"
)

// The admin API is the operator plane on the Client: look at jobs, cancel,
// delete and retry them, pause queues, flip kill switches, manage
// schedules, and read the kind catalog. The CLI and the dashboard are built
// on it, never on the storage seam. A Client made by NewClient serves all
// of it without Start: a tool that only administers never runs a worker.
//
// Every write comes as a pair, X and XTx, as Enqueue does: XTx takes a
// transaction the caller began on the store's database (a *sql.Tx for
// SQLite, a pgx.Tx for PostgreSQL), so the action commits with the
// caller's own writes or not at all. Both funnel into one function over an
// executor.
//
// Errors: every error the caller's input caused (an unknown queue, kind or
// schedule, a job id that does not exist, a time in the past, an empty
// selection) wraps ErrInvalidInput, so a tool can map it to a usage error
// (the CLI's exit status 2); the other errors are about the state of the
// system (a finished job cannot be cancelled, a running one deleted) or a
// failure of the database (exit status 1). The specific sentinels below
// let a caller tell the cases apart with errors.Is.

// ErrInvalidInput matches every error the caller's input caused (the
// sentinels marked "usage"): fix the call and try again.
var ErrInvalidInput = errors.New("invalid input")

// inputError is an error of the usage class: errors.Is matches it with
// ErrInvalidInput, and with sentinel when set. The sentinels of the usage
// class are inputErrors themselves.
type inputError struct {
	msg      string
	sentinel error
}

// usageError returns a sentinel of the usage class.
func usageError(msg string) error { return &inputError{msg: msg} }

func (e *inputError) Error() string { return e.msg }
func (e *inputError) Is(target error) bool {
	return target == ErrInvalidInput || (e.sentinel != nil && target == e.sentinel)
}

// Sentinels of the admin API. Those marked "usage" also match
// ErrInvalidInput.
var (
	// ErrJobNotFound: no job has that id (usage). A finished job may have
	// been deleted by retention.
	ErrJobNotFound error = &inputError{msg: "job not found"}
	// ErrUnknownQueue: the queue is in no catalog and holds no jobs (usage),
	// so pausing it would pause nothing anyone meant.
	ErrUnknownQueue error = &inputError{msg: "unknown queue"}
	// ErrUnknownSchedule: no schedule of that name is recorded in the store,
	// registered in this client, or published in the catalog (usage).
	ErrUnknownSchedule error = &inputError{msg: "unknown schedule"}
	// ErrJobFinished: the job is completed, dead, discarded or cancelled,
	// so it cannot be cancelled (state).
	ErrJobFinished = errors.New("job already finished")
	// ErrJobRunning: the job is running, so it cannot be deleted or retried;
	// cancel it first (state).
	ErrJobRunning = errors.New("job is running")
	// ErrJobNotRetryable: the job is waiting to run, or completed and not
	// asked for as such (a filter with State completed), or a completed
	// workflow task or batch member; dead, discarded and cancelled jobs
	// are retried, and completed ones when asked for (state).
	ErrJobNotRetryable = errors.New("job is not dead, discarded or cancelled")
	// ErrJobNotDead: the job is not dead, so it cannot be discarded
	// (state).
	ErrJobNotDead = errors.New("job is not dead")
	// ErrWorkflowNotFound: no workflow has that id (usage). It also
	// matches twicestore.ErrNotFound, which WorkflowGet wrapped before.
	ErrWorkflowNotFound error = &inputError{msg: "workflow not found", sentinel: twicestore.ErrNotFound}
	// ErrMarkerNotFound: the handler has no marker for that key (usage):
	// it has not processed it, or the name or key is misspelled (a
	// handler's name is its kind unless KindOpts.HandlerName says
	// otherwise).
	ErrMarkerNotFound error = &inputError{msg: "marker not found"}
	// ErrUniqueConflict: retrying the job would put a second job holding
	// its unique key in the queue: an unfinished one, or a finished one
	// whose UniqueOpts.ByStates hold the key in its state. The other jobs
	// of the same batch are still retried.
	ErrUniqueConflict = errors.New("another job holds the same unique key")
)

// Caps on the free text of admin calls, refused with ErrInvalidInput over
// them, as are NUL bytes and bytes that are not UTF-8 (PostgreSQL refuses
// both; every driver is held to the same rule). Names with a rule of their
// own keep it: kinds MaxKindBytes, queues MaxQueueBytes, marker handlers
// and keys MaxKeyBytes.
const (
	// MaxReasonBytes is the longest Reason of an admin call: a sentence or
	// two and a link.
	MaxReasonBytes = freetext.MaxReasonBytes
	// MaxNameBytes is the longest By (who acts), schedule name, switch
	// Source, trigger RequestID, node filter, and Config.NodeID.
	MaxNameBytes = freetext.MaxNameBytes
)

// errUnknownKind is ErrUnknownKind in the usage class: the admin API
// refuses kinds in no catalog and no registry as bad input.
func errUnknownKind(format string, a ...any) error {
	return &inputError{msg: fmt.Sprintf(format, a...), sentinel: ErrUnknownKind}
}

// invalidf returns a usage error.
func invalidf(format string, a ...any) error {
	return &inputError{msg: fmt.Sprintf(format, a...)}
}

// checkFields refuses the first of an admin call's free-text fields that
// freetext.Check refuses, as a usage error. Every admin entry calls it once,
// before anything reaches the store, in the function the X and XTx twins
// share: so both drivers refuse the same bytes (PostgreSQL would answer
// with SQLSTATE 22021; SQLite would store them), and nothing is stored.
func checkFields(fields ...freetext.Field) error {
	if err := freetext.CheckAll(fields...); err != nil {
		return &inputError{msg: err.Error()}
	}
	return nil
}

// byField and reasonField are the who and why every admin write takes.
func byField(by string) freetext.Field {
	return freetext.Field{Name: "by", Value: by, Max: MaxNameBytes}
}

func reasonField(reason string) freetext.Field {
	return freetext.Field{Name: "reason", Value: reason, Max: MaxReasonBytes}
}

// adminExec is the executor of an admin call: the store for X, the
// caller's transaction for XTx.
func (c *Client) adminExec(op string, tx any) (twicestore.Executor, error) {
	if tx == nil {
		return nil, fmt.Errorf("twice: %s: %w", op, invalidf("the transaction is nil: call the variant without Tx to use the store"))
	}
	exec, err := c.store.ExecutorFromTx(tx)
	if err != nil {
		return nil, fmt.Errorf("twice: %s in transaction: %w", op, err)
	}
	return exec, nil
}

// notFuture refuses a time that has passed: an expiry or an until in the
// past would undo the action the moment it is taken.
func notFuture(what string, t, now time.Time) error {
	if t.IsZero() || t.After(now) {
		return nil
	}
	return invalidf("%s %s is not in the future: give a later time, or none", what, t.UTC().Format(time.RFC3339))
}

// byOr names who acted, for the record, when the caller did not say.
func byOr(by string) string {
	if by = strings.TrimSpace(by); by != "" {
		return by
	}
	return "api"
}

// logAction records an operator action: who did what and why. Every
// admin write is logged, as the CLI and dashboard always did.
func (c *Client) logAction(ctx context.Context, msg string, by, reason string, attrs ...any) {
	attrs = append([]any{logattr.Component, "admin", "by", by, "reason", reason}, attrs...)
	c.logger.Log(ctx, slog.LevelInfo, msg, attrs...)
}
