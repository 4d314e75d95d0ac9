package enqueuecases

import (
	"encoding/json"
	"testing"
)

// TestCasesAreWellFormed: names are unique, every class maps to a Go
// sentinel and (but for a Go-only one) a SQLSTATE, and every case that
// does not run alike on both paths says why.
func TestCasesAreWellFormed(t *testing.T) {
	t.Parallel()
	names := map[string]bool{}
	both := 0
	for _, c := range Cases() {
		if names[c.Name] {
			t.Errorf("case %q: the name is given twice", c.Name)
		}
		names[c.Name] = true
		if c.GoOnly != "" && c.SQLOnly != "" {
			t.Errorf("case %q runs on neither path", c.Name)
		}
		if c.RawSQLOpts != "" && c.SQLOnly == "" {
			t.Errorf("case %q has RawSQLOpts, which Go cannot run: say why in SQLOnly", c.Name)
		}
		if c.SQLWant != nil && (c.Why == "") == (c.KnownDifference == "") {
			t.Errorf("case %q has SQLWant: give exactly one of Why (a design) and KnownDifference (a defect)", c.Name)
		}
		if c.SQLWant == nil && (c.Why != "" || c.KnownDifference != "") {
			t.Errorf("case %q says the paths differ but has no SQLWant", c.Name)
		}
		for _, w := range []Expect{c.Want, c.ForSQL()} {
			if w.Refused == "" {
				continue
			}
			if _, ok := classes[w.Refused]; !ok {
				t.Errorf("case %q: class %q has no mapping", c.Name, w.Refused)
			}
			if w.Says == "" {
				t.Errorf("case %q: a refusal must say what its message contains", c.Name)
			}
		}
		if c.RunsOnSQL() {
			if w := c.ForSQL(); w.Refused != "" && w.Refused.SQLState() == "" {
				t.Errorf("case %q runs on SQL with class %q, which has no SQLSTATE", c.Name, w.Refused)
			}
			if c.RawSQLOpts != "" && !json.Valid([]byte(c.RawSQLOpts)) {
				t.Errorf("case %q: RawSQLOpts %s is not JSON", c.Name, c.RawSQLOpts)
			}
		}
		if c.RunsOnGo() && c.RunsOnSQL() && c.SQLWant == nil {
			both++
		}
	}
	if both < 25 {
		t.Errorf("%d cases run alike on both paths, want at least 25", both)
	}
	for _, cl := range Classes() {
		if cl.GoErr() == nil {
			t.Errorf("class %q maps to no Go error", cl)
		}
	}
}

// TestOptionsSQL: the opts object is JSON with the SQL function's keys,
// and keeps bytes that are not UTF-8 as they are.
func TestOptionsSQL(t *testing.T) {
	t.Parallel()
	o := Options{Queue: "q", RunAt: "2999-01-02T03:04:05Z", Delay: 1.5, Priority: -2, MaxAttempts: 3, UniqueKey: "k\"\x00",
		Metadata: map[string]string{"b": "2", "a": "1"}, Force: true}
	want := `{"queue": "q", "run_at": "2999-01-02T03:04:05Z", "delay": 1.5, "priority": -2, "max_attempts": 3, ` +
		`"unique_key": "k\"\u0000", "metadata": {"a": "1", "b": "2"}, "force": true}`
	if got := o.SQL(); got != want {
		t.Errorf("SQL() =\n%s\nwant\n%s", got, want)
	}
	if got := (Options{UniqueKey: "a\xffb"}).SQL(); got != "{\"unique_key\": \"a\xffb\"}" {
		t.Errorf("SQL() = %q, want the byte kept", got)
	}
	if got := (Options{}).SQL(); got != "{}" {
		t.Errorf("SQL() of no options = %q", got)
	}
}
