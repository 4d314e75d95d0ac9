package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/demo"
	"github.com/twicejobs/twice/internal/ops"
	"github.com/twicejobs/twice/twicetype"
)

// jobJSON is a job as the CLI prints it with --json.
type jobJSON struct {
	ID            int64                    `json:"id"`
	Kind          string                   `json:"kind"`
	Queue         string                   `json:"queue"`
	Priority      int                      `json:"priority"`
	State         twicetype.JobState       `json:"state"`
	Attempt       int                      `json:"attempt"`
	MaxAttempts   int                      `json:"max_attempts"`
	Epoch         int64                    `json:"epoch"`
	MessageID     string                   `json:"message_id"`
	Key           string                   `json:"key"`
	CorrelationID string                   `json:"correlation_id"`
	UniqueKey     string                   `json:"unique_key,omitempty"`
	Args          json.RawMessage          `json:"args"`
	ArgsRedacted  []string                 `json:"args_redacted,omitempty"`
	ArgsTypeKnown bool                     `json:"args_type_known"`
	RunAt         time.Time                `json:"run_at"`
	LeaseUntil    *time.Time               `json:"lease_until,omitempty"`
	AttemptedBy   string                   `json:"attempted_by,omitempty"`
	Note          string                   `json:"note,omitempty"`
	Errors        []twicetype.AttemptError `json:"errors"`
	CreatedAt     time.Time                `json:"created_at"`
	FinishedAt    *time.Time               `json:"finished_at,omitempty"`
}

func newJobJSON(j *twicetype.JobRow) *jobJSON {
	args, redacted, known := redactedArgs(j.Kind, j.Args)
	out := &jobJSON{
		ID: j.ID, Kind: j.Kind, Queue: j.Queue, Priority: j.Priority, State: j.State,
		Attempt: j.Attempt, MaxAttempts: j.MaxAttempts, Epoch: j.Epoch,
		MessageID: j.MessageID, Key: j.Key, CorrelationID: j.CorrelationID, UniqueKey: j.UniqueKey,
		Args: args, ArgsRedacted: redacted, ArgsTypeKnown: known,
		RunAt: j.RunAt, AttemptedBy: j.AttemptedBy, Note: j.Note,
		Errors: j.Errors, CreatedAt: j.CreatedAt,
	}
	if out.Errors == nil {
		out.Errors = []twicetype.AttemptError{}
	}
	if !j.LeaseUntil.IsZero() {
		out.LeaseUntil = &j.LeaseUntil
	}
	if !j.FinishedAt.IsZero() {
		out.FinishedAt = &j.FinishedAt
	}
	return out
}

func jobsJSON(jobs []*twicetype.JobRow) []*jobJSON {
	out := make([]*jobJSON, len(jobs))
	for i, j := range jobs {
		out[i] = newJobJSON(j)
	}
	return out
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// argsTypes maps the kinds this binary knows to their args types, whose
// tags say which fields are sensitive.
var argsTypes = func() map[string]reflect.Type {
	m := map[string]reflect.Type{}
	for _, a := range demo.Kinds() {
		m[a.Kind()] = reflect.TypeOf(a)
	}
	return m
}()

// redactedArgs returns a job's args with the fields its type tags
// `twice:"sensitive"` replaced by ops.RedactedMark, the names of those
// fields, and whether the kind's type is known to this binary (when it is
// not, no field can be recognised as sensitive).
func redactedArgs(kind string, raw []byte) (json.RawMessage, []string, bool) {
	t, known := argsTypes[kind]
	if !known {
		return json.RawMessage(raw), nil, false
	}
	args, redacted := redact(raw, twice.SensitiveFields(t))
	return args, redacted, true
}

// redact replaces the named top-level fields of a JSON object; see
// ops.Redact.
func redact(raw []byte, fields []string) (json.RawMessage, []string) { return ops.Redact(raw, fields) }

// printJobTable prints jobs one per line.
func printJobTable(w io.Writer, jobs []*twicetype.JobRow) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tKIND\tQUEUE\tSTATE\tATTEMPT\tRUN AT\tNOTE / LAST ERROR")
	for _, j := range jobs {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d/%d\t%s\t%s\n",
			j.ID, j.Kind, j.Queue, j.State, j.Attempt, j.MaxAttempts, formatTime(j.RunAt), truncate(noteOrError(j), 70))
	}
	tw.Flush()
}

func noteOrError(j *twicetype.JobRow) string {
	if j.Note != "" {
		return j.Note
	}
	if n := len(j.Errors); n > 0 {
		return j.Errors[n-1].Error
	}
	return ""
}

// truncate shortens s to one line of at most n runes.
func truncate(s string, n int) string {
	s = oneLine(s)
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// printJob prints one job in full.
func printJob(w io.Writer, j *twicetype.JobRow) {
	fmt.Fprintf(w, "job %d  %s  %s\n\n", j.ID, j.Kind, j.State)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "  %s\t%s\n", k, v) }
	row("message id", j.MessageID)
	row("key", j.Key)
	row("correlation id", j.CorrelationID)
	if j.UniqueKey != "" {
		row("unique key", j.UniqueKey)
	}
	row("queue", fmt.Sprintf("%s (priority %d)", j.Queue, j.Priority))
	row("attempt", fmt.Sprintf("%d of %d", j.Attempt, j.MaxAttempts))
	row("epoch", fmt.Sprint(j.Epoch))
	row("created at", formatTime(j.CreatedAt))
	row("run at", formatTime(j.RunAt))
	if !j.LeaseUntil.IsZero() {
		row("lease until", formatTime(j.LeaseUntil))
	}
	if j.AttemptedBy != "" {
		row("attempted by", j.AttemptedBy)
	}
	if !j.FinishedAt.IsZero() {
		row("finished at", formatTime(j.FinishedAt))
	}
	if j.Note != "" {
		row("note", j.Note)
	}
	tw.Flush()

	args, _, known := redactedArgs(j.Kind, j.Args)
	fmt.Fprintln(w, "\nargs")
	if !known {
		fmt.Fprintf(w, "  (this binary does not register %s, so fields tagged sensitive cannot be recognised and nothing is redacted)\n", j.Kind)
	}
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, args, "  ", "  "); err != nil {
		pretty.Reset()
		pretty.Write(args)
	}
	fmt.Fprintf(w, "  %s\n", pretty.String())

	fmt.Fprintf(w, "\nerrors (%d)\n", len(j.Errors))
	for _, e := range j.Errors {
		fmt.Fprintf(w, "  attempt %d at %s: %s\n", e.Attempt, formatTime(e.At), e.Error)
		if e.Stack != "" {
			for _, line := range strings.Split(strings.TrimRight(e.Stack, "\n"), "\n") {
				fmt.Fprintf(w, "      %s\n", line)
			}
		}
	}
}
