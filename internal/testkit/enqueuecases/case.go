package enqueuecases

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/twicejobs/twice"
)

// Case is one enqueue both paths run.
type Case struct {
	// Name names the case in test output; names are unique.
	Name string
	// Kind is the kind enqueued; NullKind passes SQL NULL instead.
	Kind     string
	NullKind bool
	// Args is the raw JSON args, given to both paths byte for byte; ""
	// is no args: SQL NULL, and no bytes for Go.
	Args string
	// Opts are the options, given to Go as EnqueueOpts and to SQL as the
	// opts object (Options.SQL).
	Opts Options
	// RawSQLOpts, when set, is the opts text the SQL path passes instead
	// of Opts': an option Go's typed EnqueueOpts cannot express (an
	// unknown key, a value of the wrong JSON type). Such a case is SQLOnly.
	RawSQLOpts string

	// Want is what both paths must do.
	Want Expect
	// SQLSays, when set, is what the SQL path's message must contain
	// instead of Want.Says: the same refusal in other words (PostgreSQL's
	// own message for input it refuses before the function runs).
	SQLSays string
	// SQLWant, when set, is what the SQL path does instead of Want. Why
	// says why the paths legitimately differ, or KnownDifference says the
	// difference is a defect not fixed yet.
	SQLWant *Expect

	// GoOnly and SQLOnly, when set, say why the case runs on that path
	// alone: the other cannot express its input.
	GoOnly, SQLOnly string
	// Why says why the SQL path legitimately expects SQLWant.
	Why string
	// KnownDifference describes a disagreement of the paths that is a
	// defect, not a design: SQLWant holds what the SQL path does today.
	KnownDifference string
}

// RunsOnGo reports whether the Go runner runs the case.
func (c Case) RunsOnGo() bool { return c.SQLOnly == "" }

// RunsOnSQL reports whether the SQL runner runs the case.
func (c Case) RunsOnSQL() bool { return c.GoOnly == "" }

// ForSQL is what the SQL path must do: SQLWant when set, else Want with
// SQLSays for its words.
func (c Case) ForSQL() Expect {
	if c.SQLWant != nil {
		return *c.SQLWant
	}
	w := c.Want
	if c.SQLSays != "" {
		w.Says = c.SQLSays
	}
	return w
}

// SQLOptsText is the opts argument the SQL path passes.
func (c Case) SQLOptsText() string {
	if c.RawSQLOpts != "" {
		return c.RawSQLOpts
	}
	return c.Opts.SQL()
}

// Expect is the outcome of an enqueue: refused with a class, or accepted
// with the stored values below.
type Expect struct {
	// Refused is the refusal's class; "" means the job is accepted.
	Refused Class
	// Says is text the refusal's message must contain: for SecretField,
	// UnknownField and WrongType it names the field.
	Says string

	// Queue, Priority and MaxAttempts are the stored job's.
	Queue       string
	Priority    int
	MaxAttempts int
	// RunAfter is the stored run_at minus the stored created_at.
	RunAfter time.Duration
	// RunAt, when set, is the stored run_at (RunAfter is then unchecked).
	RunAt time.Time
	// Metadata is the stored metadata (nil: none).
	Metadata map[string]string
	// UniqueKey is the stored unique key.
	UniqueKey string
	// StoredArgs, when set, is JSON equal to the stored args; otherwise
	// the stored args are JSON equal to the case's Args. Either way they
	// are stored compact.
	StoredArgs string
	// RepeatIsDuplicate: the same enqueue again returns the first job
	// and stores nothing.
	RepeatIsDuplicate bool
}

// Options mirror twice_enqueue's opts keys; a zero field is a key not
// given. MessageID and CorrelationID are Go only: the SQL function sets
// both to a new UUID.
type Options struct {
	Queue string
	// RunAt is an RFC 3339 time.
	RunAt string
	// Delay is in seconds, as the SQL function takes it.
	Delay       float64
	Priority    int
	MaxAttempts int
	UniqueKey   string
	Metadata    map[string]string
	// Force stores a kind the catalog does not hold (Go's
	// AllowUnknownKind).
	Force bool

	MessageID, CorrelationID string
}

// Go is the options as Go's EnqueueOpts.
func (o Options) Go() *twice.EnqueueOpts {
	g := &twice.EnqueueOpts{
		Queue:            o.Queue,
		Delay:            time.Duration(o.Delay * float64(time.Second)),
		Priority:         o.Priority,
		MaxAttempts:      o.MaxAttempts,
		UniqueKey:        o.UniqueKey,
		Metadata:         o.Metadata,
		AllowUnknownKind: o.Force,
		MessageID:        o.MessageID,
		CorrelationID:    o.CorrelationID,
	}
	if o.RunAt != "" {
		t, err := time.Parse(time.RFC3339, o.RunAt)
		if err != nil {
			panic(fmt.Sprintf("enqueuecases: RunAt %q is not RFC 3339: %v", o.RunAt, err))
		}
		g.RunAt = t
	}
	return g
}

// SQL is the options as twice_enqueue's opts object. Strings are written
// byte for byte (only '"', '\' and control characters escaped), so a
// case's bytes that are not UTF-8 reach the server as they are, where
// json.Marshal would replace them.
func (o Options) SQL() string {
	var members []string
	add := func(key, value string) { members = append(members, jsonString(key)+": "+value) }
	if o.Queue != "" {
		add("queue", jsonString(o.Queue))
	}
	if o.RunAt != "" {
		add("run_at", jsonString(o.RunAt))
	}
	if o.Delay != 0 {
		add("delay", strconv.FormatFloat(o.Delay, 'f', -1, 64))
	}
	if o.Priority != 0 {
		add("priority", strconv.Itoa(o.Priority))
	}
	if o.MaxAttempts != 0 {
		add("max_attempts", strconv.Itoa(o.MaxAttempts))
	}
	if o.UniqueKey != "" {
		add("unique_key", jsonString(o.UniqueKey))
	}
	if o.Metadata != nil {
		keys := make([]string, 0, len(o.Metadata))
		for k := range o.Metadata {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		m := make([]string, len(keys))
		for i, k := range keys {
			m[i] = jsonString(k) + ": " + jsonString(o.Metadata[k])
		}
		add("metadata", "{"+strings.Join(m, ", ")+"}")
	}
	if o.Force {
		add("force", "true")
	}
	return "{" + strings.Join(members, ", ") + "}"
}

// jsonString quotes s as a JSON string, escaping only what JSON requires.
func jsonString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20:
			fmt.Fprintf(&b, `\u%04x`, c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}
