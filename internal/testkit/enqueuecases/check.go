package enqueuecases

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"strings"
	"time"

	"github.com/twicejobs/twice/twicetype"
)

// precision is how far apart two stored times may be and still be the
// same time: the drivers store microseconds.
const precision = time.Millisecond

// CheckStored says how row, the job an accepted enqueue of args stored,
// differs from e, or returns nil. Both runners read the row back the same
// way (the store's JobGet), so a difference is the path's, not the read's.
func (e Expect) CheckStored(args string, row *twicetype.JobRow) error {
	var diffs []string
	differ := func(what string, got, want any) {
		diffs = append(diffs, fmt.Sprintf("%s %v, want %v", what, short(got), short(want)))
	}
	if row.Queue != e.Queue {
		differ("queue", row.Queue, e.Queue)
	}
	if row.Priority != e.Priority {
		differ("priority", row.Priority, e.Priority)
	}
	if row.MaxAttempts != e.MaxAttempts {
		differ("max attempts", row.MaxAttempts, e.MaxAttempts)
	}
	if row.UniqueKey != e.UniqueKey {
		differ("unique key", row.UniqueKey, e.UniqueKey)
	}
	if row.State != twicetype.JobStateAvailable {
		differ("state", row.State, twicetype.JobStateAvailable)
	}
	if !e.RunAt.IsZero() {
		if d := row.RunAt.Sub(e.RunAt); d < -precision || d > precision {
			differ("run_at", row.RunAt, e.RunAt)
		}
	} else if d := row.RunAt.Sub(row.CreatedAt) - e.RunAfter; d < -precision || d > precision {
		differ("run_at - created_at", row.RunAt.Sub(row.CreatedAt), e.RunAfter)
	}
	if len(row.Metadata) != 0 || len(e.Metadata) != 0 {
		if !maps.Equal(row.Metadata, e.Metadata) {
			differ("metadata", row.Metadata, e.Metadata)
		}
	}
	want := args
	if e.StoredArgs != "" {
		want = e.StoredArgs
	}
	if !jsonEqual(row.Args, []byte(want)) {
		differ("args", string(row.Args), want)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, row.Args); err != nil || !bytes.Equal(compact.Bytes(), row.Args) {
		differ("args", string(row.Args), "compact JSON")
	}
	if len(diffs) == 0 {
		return nil
	}
	return errors.New("stored job: " + strings.Join(diffs, "; "))
}

// CheckGoErr says how err, what Go's EnqueueJSON returned, differs from
// the refusal e, or returns nil.
func (e Expect) CheckGoErr(err error) error {
	switch {
	case err == nil:
		return fmt.Errorf("accepted, want refused as %s (%q)", e.Refused, e.Says)
	case !errors.Is(err, e.Refused.GoErr()):
		return fmt.Errorf("error %q does not wrap %q, which class %s maps to", err.Error(), e.Refused.GoErr().Error(), e.Refused)
	case !strings.Contains(err.Error(), e.Says):
		return fmt.Errorf("error %q does not say %q", err.Error(), e.Says)
	}
	return nil
}

// CheckSQLErr says how a SQL refusal with SQLSTATE code and message msg
// differs from e, or returns nil.
func (e Expect) CheckSQLErr(code, msg string) error {
	switch {
	case code != e.Refused.SQLState():
		return fmt.Errorf("SQLSTATE %q (%q), want %s for class %s", code, msg, e.Refused.SQLState(), e.Refused)
	case !strings.Contains(msg, e.Says):
		return fmt.Errorf("message %q does not say %q", msg, e.Says)
	}
	return nil
}

// jsonEqual reports whether a and b are the same JSON value, numbers
// compared by value (jsonb writes 1e3 as 1000).
func jsonEqual(a, b []byte) bool {
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return false
	}
	return reflect.DeepEqual(va, vb)
}

// short cuts a long value for a failure message.
func short(v any) string {
	s := fmt.Sprint(v)
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}
