package twice

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/twicejobs/twice/twicetype"
)

var logRow = &twicetype.JobRow{ID: 42, Kind: "email.welcome.v1", Queue: "default", Attempt: 2,
	MessageID: "m-1", CorrelationID: "c-1"}

// TestJobLoggerLogsLikeWith: the lazy job logger writes what the logger
// with the job's attributes added up front writes, through With, groups
// and levels alike.
func TestJobLoggerLogsLikeWith(t *testing.T) {
	logAll := func(l *slog.Logger) {
		l.Debug("hidden")
		l.Info("plain", "k", 1)
		l.With("redelivery", true).Warn("with")
		l.WithGroup("g").Error("grouped", "x", "y")
	}
	var lazy, eager bytes.Buffer
	opts := &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}}
	c := &Client{logger: slog.New(slog.NewJSONHandler(&lazy, opts)).With("node", "n1")}
	logAll(jobLogger(c.logger, logRow))
	logAll(slog.New(slog.NewJSONHandler(&eager, opts)).With("node", "n1").With(
		"job_id", logRow.ID, "kind", logRow.Kind, "queue", logRow.Queue, "attempt", logRow.Attempt,
		"message_id", logRow.MessageID, "correlation_id", logRow.CorrelationID))
	if lazy.String() != eager.String() {
		t.Errorf("lazy job logger wrote\n%s\nwant\n%s", lazy.String(), eager.String())
	}
}

// BenchmarkJobLogger: building a job's logger and logging nothing at the
// enabled level, as most jobs do, lazily against adding the attributes up
// front (what jobLogger did before).
func BenchmarkJobLogger(b *testing.B) {
	c := &Client{logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctx := context.Background()
	b.Run("lazy", func(b *testing.B) {
		for b.Loop() {
			jobLogger(c.logger, logRow).DebugContext(ctx, "job completed")
		}
	})
	b.Run("eager", func(b *testing.B) {
		for b.Loop() {
			c.logger.With("job_id", logRow.ID, "kind", logRow.Kind, "queue", logRow.Queue, "attempt", logRow.Attempt,
				"message_id", logRow.MessageID, "correlation_id", logRow.CorrelationID).DebugContext(ctx, "job completed")
		}
	})
}
