package toggles

import (
	"testing"
	"time"

	"github.com/twicejobs/twice/twicetype"
)

// src is one source's value for the kind in a test case.
type src int

const (
	absent src = iota
	on
	off
)

func (s src) String() string { return [...]string{"absent", "on", "off"}[s] }

func TestDecide(t *testing.T) {
	t.Parallel()
	const enabled, failClosed = false, true
	// Every combination, each expected value written out by hand from the
	// rule in DESIGN.md, not computed: off anywhere wins, then an explicit
	// on, then the default. When both sources agree the store decides (it
	// carries who and why).
	tests := []struct {
		file, store src
		failClosed  bool
		wantOn      bool
		wantBy      Source
	}{
		{absent, absent, enabled, true, SourceDefault},
		{absent, on, enabled, true, SourceStore},
		{absent, off, enabled, false, SourceStore},
		{on, absent, enabled, true, SourceFile},
		{on, on, enabled, true, SourceStore},
		{on, off, enabled, false, SourceStore},
		{off, absent, enabled, false, SourceFile},
		{off, on, enabled, false, SourceFile},
		{off, off, enabled, false, SourceStore},

		{absent, absent, failClosed, false, SourceDefault},
		{absent, on, failClosed, true, SourceStore},
		{absent, off, failClosed, false, SourceStore},
		{on, absent, failClosed, true, SourceFile},
		{on, on, failClosed, true, SourceStore},
		{on, off, failClosed, false, SourceStore},
		{off, absent, failClosed, false, SourceFile},
		{off, on, failClosed, false, SourceFile},
		{off, off, failClosed, false, SourceStore},
	}
	if len(tests) != 18 {
		t.Fatalf("%d cases, want all 18 combinations", len(tests))
	}
	seen := make(map[[3]int]bool)
	for _, tc := range tests {
		key := [3]int{int(tc.file), int(tc.store), map[bool]int{false: 0, true: 1}[tc.failClosed]}
		if seen[key] {
			t.Fatalf("combination %v listed twice", key)
		}
		seen[key] = true
	}

	at := time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC)
	for _, tc := range tests {
		name := "file=" + tc.file.String() + "/store=" + tc.store.String() + "/default="
		if tc.failClosed {
			name += "fail-closed"
		} else {
			name += "enabled"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			// The sources spell the kind in other cases than the caller:
			// keys are case-insensitive.
			var fileMap map[string]bool
			if tc.file != absent {
				fileMap = map[string]bool{"email.welcome.v1": tc.file == on, "other.v1": false}
			}
			var storeList []twicetype.Toggle
			if tc.store != absent {
				storeList = []twicetype.Toggle{
					{Kind: "Email.Welcome.V1", Enabled: tc.store == on, Reason: "smtp down", By: "ops@host", At: at},
					{Kind: "other.v1", Enabled: false},
				}
			}

			check := func(t *testing.T, d Decision) {
				t.Helper()
				if d.Enabled != tc.wantOn || d.DecidedBy != tc.wantBy {
					t.Errorf("got enabled=%v by %s, want enabled=%v by %s", d.Enabled, d.DecidedBy, tc.wantOn, tc.wantBy)
				}
				if d.Kind != "EMAIL.welcome.v1" || d.FailClosed != tc.failClosed {
					t.Errorf("got kind %q failClosed %v", d.Kind, d.FailClosed)
				}
				if d.FileSet != (tc.file != absent) || d.FileEnabled != (tc.file == on) {
					t.Errorf("got file set=%v enabled=%v, want %s", d.FileSet, d.FileEnabled, tc.file)
				}
				if d.StoreSet != (tc.store != absent) {
					t.Errorf("got store set=%v, want %s", d.StoreSet, tc.store)
				}
				if tc.store != absent && (d.Store.Enabled != (tc.store == on) || d.Store.By != "ops@host" || d.Store.Reason != "smtp down" || !d.Store.At.Equal(at)) {
					t.Errorf("got store toggle %+v", d.Store)
				}
			}

			set := NewSet(fileMap, storeList)
			check(t, set.Decide("EMAIL.welcome.v1", tc.failClosed))

			// The pure function, over maps keyed lower-case.
			var storeMap map[string]twicetype.Toggle
			if storeList != nil {
				storeMap = map[string]twicetype.Toggle{"email.welcome.v1": storeList[0]}
			}
			check(t, Decide("EMAIL.welcome.v1", tc.failClosed, fileMap, storeMap))
		})
	}
}

func TestZeroSetIsDefaults(t *testing.T) {
	t.Parallel()
	var s Set
	if d := s.Decide("a.v1", false); !d.Enabled || d.DecidedBy != SourceDefault {
		t.Errorf("enabled-by-default kind: %v", d)
	}
	if d := s.Decide("a.v1", true); d.Enabled || d.DecidedBy != SourceDefault {
		t.Errorf("fail-closed kind: %v", d)
	}
}

func TestNewSetDuplicatesOffWins(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := NewSet(
		map[string]bool{"A.v1": true, "a.V1": false},
		[]twicetype.Toggle{
			{Kind: "b.v1", Enabled: false, By: "first", At: t0},
			{Kind: "B.v1", Enabled: true, By: "second", At: t0.Add(time.Hour)},
			{Kind: "c.v1", Enabled: true, By: "older", At: t0},
			{Kind: "C.V1", Enabled: true, By: "newer", At: t0.Add(time.Hour)},
		})
	if d := s.Decide("a.v1", false); d.Enabled || d.DecidedBy != SourceFile {
		t.Errorf("a.v1: %v", d)
	}
	if d := s.Decide("b.v1", false); d.Enabled || d.Store.By != "first" {
		t.Errorf("b.v1: %v", d)
	}
	if d := s.Decide("c.v1", false); !d.Enabled || d.Store.By != "newer" {
		t.Errorf("c.v1: %v", d)
	}
	got := s.Keys()
	want := []string{"a.v1", "b.v1", "c.v1"}
	if len(got) != len(want) {
		t.Fatalf("Keys() = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("Keys() = %v, want %v", got, want)
		}
	}
}

func TestDecisionString(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC)
	tests := []struct {
		d    Decision
		want string
	}{
		{Decision{Kind: "a.v1", Enabled: true, DecidedBy: SourceDefault}, "a.v1 on (default)"},
		{Decision{Kind: "a.v1", DecidedBy: SourceDefault, FailClosed: true}, "a.v1 off (default: fail-closed)"},
		{Decision{Kind: "a.v1", DecidedBy: SourceFile}, "a.v1 off (file)"},
		{Decision{Kind: "a.v1", DecidedBy: SourceStore, StoreSet: true, Store: twicetype.Toggle{By: "ops@host", At: at, Reason: "smtp down"}},
			`a.v1 off (store by ops@host at 2026-01-02T15:04:05Z: "smtp down")`},
	}
	for _, tc := range tests {
		if got := tc.d.String(); got != tc.want {
			t.Errorf("got %s, want %s", got, tc.want)
		}
	}
}
