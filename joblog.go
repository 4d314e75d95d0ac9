package twice

import (
	"context"
	"log/slog"
	"sync"

	"github.com/twicejobs/twice/internal/logattr"
	"github.com/twicejobs/twice/twicetype"
)

// jobLogger returns logger with the job's attributes, added only when
// something is logged (see jobLogHandler).
func jobLogger(logger *slog.Logger, row *twicetype.JobRow) *slog.Logger {
	return slog.New(newJobLogHandler(logger.Handler(), row))
}

// jobLogHandler is a handler with a job's attributes added, built on first
// use: most jobs log nothing at the enabled levels, and adding six
// attributes up front (which text and JSON handlers pre-format) cost a
// busy worker more than running its no-op jobs. What it logs is exactly what
// inner.WithAttrs(the job's attributes) would log.
type jobLogHandler struct {
	inner slog.Handler
	row   *twicetype.JobRow // not changed once fetched

	once sync.Once
	with slog.Handler
}

func newJobLogHandler(inner slog.Handler, row *twicetype.JobRow) *jobLogHandler {
	return &jobLogHandler{inner: inner, row: row}
}

func (h *jobLogHandler) handler() slog.Handler {
	h.once.Do(func() {
		h.with = h.inner.WithAttrs([]slog.Attr{
			slog.Int64(logattr.JobID, h.row.ID),
			slog.String(logattr.Kind, h.row.Kind),
			slog.String(logattr.Queue, h.row.Queue),
			slog.Int(logattr.Attempt, h.row.Attempt),
			slog.String(logattr.MessageID, h.row.MessageID),
			slog.String(logattr.CorrelationID, h.row.CorrelationID),
		})
	})
	return h.with
}

// Enabled asks the inner handler: attributes do not change a level.
func (h *jobLogHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.inner.Enabled(ctx, level)
}

// Handle logs r with the job's attributes.
func (h *jobLogHandler) Handle(ctx context.Context, r slog.Record) error {
	return h.handler().Handle(ctx, r)
}

// WithAttrs adds attrs after the job's.
func (h *jobLogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return h.handler().WithAttrs(attrs)
}

// WithGroup opens a group after the job's attributes.
func (h *jobLogHandler) WithGroup(name string) slog.Handler {
	return h.handler().WithGroup(name)
}
