package twicetype

import "time"

// Signal is how one wait of one job was resolved: by a signal of the
// wait's name, with its payload, or by the wait's timer (TimedOut). A job
// holds at most one per name, and keeps it for as long as the job exists:
// every run of its handler reads the same resolution.
type Signal struct {
	JobID int64
	Name  string
	// Payload is the signal's payload as JSON; nil for a timeout.
	Payload []byte
	// TimedOut reports that the wait's timer fired before any signal of
	// its name arrived.
	TimedOut bool
	// At is when the signal arrived or the timer fired.
	At time.Time
	// Sender names who sent the signal (user@host for the CLI, the
	// principal of an HTTP request); empty for a timeout.
	Sender string
}
