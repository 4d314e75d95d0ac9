// Package logattr declares, in one place, the slog attribute keys every twice
// log line uses, so logs can be searched by the same names everywhere.
package logattr

// The attribute keys.
const (
	Err           = "err"
	JobID         = "job_id"
	Kind          = "kind"
	Queue         = "queue"
	Attempt       = "attempt"
	MessageID     = "message_id"
	CorrelationID = "correlation_id"
	Component     = "component"
	Node          = "node"
)
