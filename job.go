package twice

import (
	"context"
	"database/sql"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/twicejobs/twice/twicestore"
)

// Job is one delivery of a message to a handler: the user's Args and the
// system's envelope around them.
type Job[T Args] struct {
	// ID is the job's row id in the store.
	ID int64
	// Args is the decoded payload.
	Args T
	// Kind is Args.Kind(), as stored.
	Kind string
	// Queue is the queue the job was fetched from.
	Queue string
	// MessageID identifies the message for transport dedup (a UUID).
	MessageID string
	// Key is the idempotency key markers are claimed under: the args'
	// IdempotencyKey, else the MessageID.
	Key string
	// CorrelationID stitches the job to the request or job that enqueued it.
	CorrelationID string
	// Attempt is this delivery's attempt number, starting at 1.
	Attempt int
	// MaxAttempts is the attempt after which a failure dead-letters the job.
	MaxAttempts int
	// Epoch is the lease's fencing token; it grows on every fetch.
	Epoch int64
	// CreatedAt is when the job was enqueued.
	CreatedAt time.Time

	tx twicestore.Tx
	// edges gathers this delivery's continuations (Then).
	edges *edgeSet
	// steps is this delivery's named steps' state (twice.Step).
	steps *stepRun
}

// FinalAttempt reports whether a failure of this attempt dead-letters the
// job.
func (j *Job[T]) FinalAttempt() bool { return j.Attempt >= j.MaxAttempts }

// Tx returns the transaction of a Transactional kind's attempt as the
// driver's own type (a *sql.Tx for SQLite), or nil for other strategies.
// The handler writes its effect in it; twice commits it together with the
// marker and the job's completion.
func (j *Job[T]) Tx() any {
	if j.tx == nil {
		return nil
	}
	return j.tx.Unwrap()
}

// SQLTx is Tx as a *sql.Tx, or nil when there is none or the driver's
// transaction is of another type.
func (j *Job[T]) SQLTx() *sql.Tx {
	tx, _ := j.Tx().(*sql.Tx)
	return tx
}

type ctxKey int

const (
	correlationKey ctxKey = iota
	loggerKey
)

// WithCorrelationID returns a context whose enqueues carry id as their
// correlation id. A handler's context already carries its job's, so jobs
// enqueued from a handler are stitched to it.
func WithCorrelationID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, correlationKey, id)
}

// CorrelationID returns the correlation id ctx carries, or "".
func CorrelationID(ctx context.Context) string {
	id, _ := ctx.Value(correlationKey).(string)
	return id
}

// Logger returns the logger a handler should use: it carries the job's id,
// kind, queue, attempt, message id and correlation id. Outside a handler it
// returns slog.Default().
func Logger(ctx context.Context) *slog.Logger {
	if l, ok := ctx.Value(loggerKey).(*slog.Logger); ok {
		return l
	}
	return slog.Default()
}

func withLogger(ctx context.Context, l *slog.Logger) context.Context {
	return context.WithValue(ctx, loggerKey, l)
}

func newMessageID() string { return uuid.NewString() }
