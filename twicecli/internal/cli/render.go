package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/ops"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// jobJSON is a job as the CLI prints it with --json: in full for 'jobs
// show', and without its attempts' errors (only the last one's first line)
// in a listing, so a listing stays small whatever the jobs failed with.
type jobJSON struct {
	ID            int64              `json:"id"`
	Kind          string             `json:"kind"`
	Queue         string             `json:"queue"`
	Priority      int                `json:"priority"`
	State         twicetype.JobState `json:"state"`
	Attempt       int                `json:"attempt"`
	MaxAttempts   int                `json:"max_attempts"`
	Epoch         int64              `json:"epoch"`
	MessageID     string             `json:"message_id"`
	Key           string             `json:"key"`
	CorrelationID string             `json:"correlation_id"`
	UniqueKey     string             `json:"unique_key,omitempty"`
	// Args are the job's args with sensitive fields redacted; null when
	// they are hidden (ArgsHidden) or unreadable (ArgsUnreadable).
	Args           json.RawMessage `json:"args"`
	ArgsRedacted   []string        `json:"args_redacted,omitempty"`
	ArgsTypeKnown  bool            `json:"args_type_known"`
	ArgsHidden     bool            `json:"args_hidden,omitempty"`
	ArgsUnreadable bool            `json:"args_unreadable,omitempty"`
	RunAt          time.Time       `json:"run_at"`
	WaitName       string          `json:"wait_name,omitempty"` // the signal a waiting job waits for; the last one it waited for
	// Scheduled reports a job waiting for a later run_at, as opposed to a
	// due one.
	Scheduled bool `json:"scheduled"`
	// QueuePaused reports that the job's queue is paused: a waiting job is
	// held there, not stuck.
	QueuePaused bool                     `json:"queue_paused"`
	LeaseUntil  *time.Time               `json:"lease_until,omitempty"`
	AttemptedBy string                   `json:"attempted_by,omitempty"`
	Note        string                   `json:"note,omitempty"`
	LastError   string                   `json:"last_error,omitempty"`
	ErrorCount  int                      `json:"error_count"`
	Errors      []twicetype.AttemptError `json:"errors,omitempty"`
	Snoozes     int                      `json:"snoozes"`
	// Cancel is the cancel an operator asked for: who, when, why. On a
	// running job it is pending: the job ends cancelled unless it finishes
	// first.
	Cancel     *cancelJSON `json:"cancel,omitempty"`
	CreatedAt  time.Time   `json:"created_at"`
	FinishedAt *time.Time  `json:"finished_at,omitempty"`
	// WaitingBecause says why a job that neither runs nor has finished
	// is not running (twice.Client.JobWaitReasons).
	WaitingBecause *twice.WaitReason `json:"waiting_because,omitempty"`
}

// cancelJSON is a job's cancel request.
type cancelJSON struct {
	At     time.Time `json:"at"`
	By     string    `json:"by"`
	Reason string    `json:"reason"`
}

// newJobJSON is j as --json prints it; full includes every attempt's
// error.
func (k *kindBook) newJobJSON(j *twicetype.JobRow, full bool, now time.Time) *jobJSON {
	a := k.args(j)
	out := &jobJSON{
		ID: j.ID, Kind: j.Kind, Queue: j.Queue, Priority: j.Priority, State: j.State,
		Attempt: j.Attempt, MaxAttempts: j.MaxAttempts, Epoch: j.Epoch,
		MessageID: j.MessageID, Key: j.Key, CorrelationID: j.CorrelationID, UniqueKey: j.UniqueKey,
		Args: a.json, ArgsRedacted: a.redacted, ArgsTypeKnown: a.known, ArgsHidden: a.hidden, ArgsUnreadable: a.unreadable,
		RunAt: j.RunAt, WaitName: j.WaitName, Scheduled: scheduled(j, now), QueuePaused: k.paused[j.Queue], AttemptedBy: j.AttemptedBy, Note: j.Note,
		ErrorCount: len(j.Errors), Snoozes: j.Snoozes, CreatedAt: j.CreatedAt, WaitingBecause: k.why[j.ID],
	}
	if c := j.Cancel; c != nil {
		out.Cancel = &cancelJSON{At: c.At, By: c.By, Reason: c.Reason}
	}
	if n := len(j.Errors); n > 0 {
		out.LastError = firstLine(j.Errors[n-1].Error, listErrorRunes)
	}
	if full {
		out.Errors = j.Errors
		if out.Errors == nil {
			out.Errors = []twicetype.AttemptError{}
		}
	}
	if !j.LeaseUntil.IsZero() {
		out.LeaseUntil = &j.LeaseUntil
	}
	if !j.FinishedAt.IsZero() {
		out.FinishedAt = &j.FinishedAt
	}
	return out
}

// listErrorRunes bounds the error a listing shows per job.
const listErrorRunes = 200

// state is j's state as a listing shows it.
func (k *kindBook) state(j *twicetype.JobRow, now time.Time) string {
	switch {
	case scheduled(j, now):
		return "scheduled"
	case j.State == twicetype.JobStateAvailable && k.paused[j.Queue]:
		return "paused"
	case j.State == twicetype.JobStateRunning && j.Cancel != nil:
		return "cancelling"
	}
	return string(j.State)
}

// runAtCell is a listing's RUN AT: for a waiting job, when its wait
// times out, "-" when it has no timeout.
func runAtCell(j *twicetype.JobRow) string {
	if j.State == twicetype.JobStateWaiting && !j.RunAt.Before(twicestore.WaitNever) {
		return "-"
	}
	return formatTime(j.RunAt)
}

// waitUntil says until when a waiting job waits: its timeout, or none.
func waitUntil(j *twicetype.JobRow) string {
	if !j.RunAt.Before(twicestore.WaitNever) {
		return "(no timeout)"
	}
	return "(times out at " + formatTime(j.RunAt) + ")"
}

// scheduled reports whether j waits for a run_at still to come.
func scheduled(j *twicetype.JobRow, now time.Time) bool {
	return j.State == twicetype.JobStateAvailable && j.RunAt.After(now)
}

func (k *kindBook) jobsJSON(jobs []*twicetype.JobRow, now time.Time) []*jobJSON {
	out := make([]*jobJSON, len(jobs))
	for i, j := range jobs {
		out[i] = k.newJobJSON(j, false, now)
	}
	return out
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// shownArgs are a job's args as the CLI may show them.
type shownArgs struct {
	json       json.RawMessage // nil when hidden or unreadable
	redacted   []string        // the sensitive fields replaced
	known      bool            // the kind's fields are known: registered or catalogued
	hidden     bool            // unknown kind, and no --show-args
	unreadable bool            // the stored bytes are not JSON
}

// args returns j's args with the fields its kind marks sensitive replaced
// by ops.RedactedMark. The args of a kind neither registered nor
// catalogued are hidden unless showUnknown (--show-args): no field of
// theirs can be recognised as sensitive. Stored bytes that are not JSON
// are reported unreadable rather than failing the whole output.
func (k *kindBook) args(j *twicetype.JobRow) shownArgs {
	if !json.Valid(j.Args) {
		return shownArgs{unreadable: true}
	}
	fields, known := k.sensitive(j.Kind)
	if !known && !k.showUnknown {
		return shownArgs{hidden: true}
	}
	args, redacted := ops.Redact(j.Args, fields)
	return shownArgs{json: args, redacted: redacted, known: known}
}

// printJobTable prints jobs one per line.
// The state column tells apart what "available" hides, so a waiting job is
// never mistaken for a stuck one: scheduled (its run_at is still to come),
// paused (due, in a paused queue); and a running job with a pending cancel
// is cancelling. A job its handler parked is waiting, with its wait's
// timeout as its run time and the signal it waits for as its note.
func (k *kindBook) printJobTable(w io.Writer, jobs []*twicetype.JobRow, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tKIND\tQUEUE\tSTATE\tATTEMPT\tRUN AT\tWHY\tNOTE / LAST ERROR")
	for _, j := range jobs {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d/%d\t%s\t%s\t%s\n",
			j.ID, terminalText(j.Kind), terminalText(j.Queue), k.state(j, now), j.Attempt, j.MaxAttempts, runAtCell(j),
			k.whyCell(j), terminalText(firstLine(noteOrError(j), 70)))
	}
	return tw.Flush()
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

// terminalText is stored text as the CLI prints it to a terminal: every
// rune a terminal would act on — C0 and C1 controls (ESC ]0;… retitles
// the terminal, ESC [2J clears it, ESC ]8;; plants a link, U+009B starts
// a sequence alone), DEL, and bidirectional overrides that reorder what
// follows — and every byte that is not UTF-8 is escaped as %q escapes it
// in a Go string (\x1b, \a, \u009b, \u202e, \xff); the rest is printed
// as it is, quotes and backslashes included. Tabs and newlines are
// escaped too, so a value stays in its cell and on its line: text meant
// to span lines is escaped line by line. Stored text comes from handlers,
// operators and producers; every place the CLI prints it (not its JSON,
// which encoding/json escapes) goes through this one function, as the
// %q of toggles history does for reasons.
func terminalText(s string) string {
	if !strings.ContainsFunc(s, actsOnTerminal) && utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for len(s) > 0 {
		r, size := utf8.DecodeRuneInString(s)
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[0])
		case actsOnTerminal(r):
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[:size])
		}
		s = s[size:]
	}
	return b.String()
}

// actsOnTerminal reports whether a terminal acts on r rather than showing
// it: a control character or a bidirectional formatting character.
func actsOnTerminal(r rune) bool {
	return unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r)
}

// truncate shortens s to one line of at most n runes.
func truncate(s string, n int) string {
	return cut(oneLine(s), n)
}

// firstLine is the first non-empty line of s, at most n runes: what a
// listing shows of an error that may be megabytes long. It reads no more
// of s than it shows.
func firstLine(s string, n int) string {
	s = strings.TrimLeft(s, " \t\r\n")
	more := false
	if i := strings.IndexAny(s, "\r\n"); i >= 0 {
		s, more = s[:i], true
	}
	s = strings.TrimSpace(s)
	if more && utf8.RuneCountInString(s) < n {
		return s + " …"
	}
	return cut(s, n)
}

// cut shortens s to at most n runes, marking the cut.
func cut(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s[:min(len(s), 4*n)])
	return string(r[:n-1]) + "…"
}

// printJob prints one job in full.
func (k *kindBook) printJob(w io.Writer, j *twicetype.JobRow, now time.Time) error {
	state := k.state(j, now)
	switch state {
	case "scheduled":
		state = "scheduled (available from " + formatTime(j.RunAt) + ")"
	case "paused":
		state = "paused (available, in paused queue " + j.Queue + ")"
	case string(twicetype.JobStateWaiting):
		state = "waiting for signal " + j.WaitName + " " + waitUntil(j)
	}
	fmt.Fprintf(w, "job %d  %s  %s\n\n", j.ID, terminalText(j.Kind), terminalText(state))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "  %s\t%s\n", k, terminalText(v)) }
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
	if j.State == twicetype.JobStateWaiting {
		row("waiting for", "signal "+j.WaitName+" "+waitUntil(j))
	} else {
		row("run at", formatTime(j.RunAt))
	}
	if r := k.why[j.ID]; r != nil {
		row("waits because", r.Text)
	}
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
	if c := j.Cancel; c != nil {
		what := "cancelled"
		if j.State == twicetype.JobStateRunning {
			what = "cancel requested (it ends cancelled unless it finishes first)"
		}
		row("cancel", fmt.Sprintf("%s by %s at %s: %q", what, c.By, formatTime(c.At), c.Reason))
	}
	if j.Snoozes > 0 {
		row("snoozes", fmt.Sprint(j.Snoozes))
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	a := k.args(j)
	fmt.Fprintln(w, "\nargs")
	switch {
	case a.unreadable:
		fmt.Fprintf(w, "  (unreadable: the %d stored bytes are not valid JSON)\n", len(j.Args))
	case a.hidden:
		fmt.Fprintf(w, "  (hidden: no live or past worker catalogued %s and this binary does not register it, so its sensitive fields are unknown; --show-args shows them unredacted)\n", j.Kind)
	default:
		if !a.known {
			fmt.Fprintf(w, "  (shown by --show-args: %s is neither registered nor catalogued, so nothing is redacted)\n", j.Kind)
		}
		var pretty bytes.Buffer
		if err := json.Indent(&pretty, a.json, "  ", "  "); err != nil {
			pretty.Reset()
			pretty.Write(a.json)
		}
		for _, line := range strings.Split(pretty.String(), "\n") {
			fmt.Fprintf(w, "  %s\n", terminalText(line))
		}
	}

	fmt.Fprintf(w, "\nerrors (%d)\n", len(j.Errors))
	for _, e := range j.Errors {
		lines := strings.Split(strings.TrimRight(e.Error, "\n"), "\n")
		fmt.Fprintf(w, "  attempt %d at %s: %s\n", e.Attempt, formatTime(e.At), terminalText(lines[0]))
		for _, line := range lines[1:] {
			fmt.Fprintf(w, "    %s\n", terminalText(line))
		}
		if e.Stack != "" {
			for _, line := range strings.Split(strings.TrimRight(e.Stack, "\n"), "\n") {
				fmt.Fprintf(w, "      %s\n", terminalText(line))
			}
		}
	}
	return nil
}
