package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// storedToggles lists the store's switches, one "kind on|off by reason"
// string each, straight from the store.
func storedToggles(t *testing.T, s *setup) []string {
	t.Helper()
	store, err := (&cli{db: s.db}).openStore(t.Context(), false)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	res, err := store.ToggleList(t.Context(), &twicestore.ToggleListParams{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, tg := range res.Toggles {
		out = append(out, fmt.Sprintf("%s %s %s %q", tg.Kind, onOff(tg.Enabled), tg.By, tg.Reason))
	}
	return out
}

// sameToggles fails the test when the stored switches differ from before.
func sameToggles(t *testing.T, s *setup, before []string) {
	t.Helper()
	if after := storedToggles(t, s); strings.Join(before, "\n") != strings.Join(after, "\n") {
		t.Errorf("stored switches changed:\nbefore: %q\nafter:  %q", before, after)
	}
}

// lsRows runs 'toggles ls --json' with extra args and returns its rows by
// kind.
func lsRows(t *testing.T, s *setup, args ...string) map[string]toggleRow {
	t.Helper()
	r := s.ok(append([]string{"toggles", "ls", "--json"}, args...)...)
	var rows []toggleRow
	if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil {
		t.Fatalf("toggles ls --json is not JSON: %v\n%s", err, r.stdout)
	}
	m := map[string]toggleRow{}
	for _, row := range rows {
		m[row.Kind] = row
	}
	return m
}

// tableLine returns the line of a table that starts with key.
func tableLine(t *testing.T, out, key string) string {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, key+" ") {
			return l
		}
	}
	t.Fatalf("no line for %s in:\n%s", key, out)
	return ""
}

func TestTogglesSetUnsetListRoundTrip(t *testing.T) {
	t.Parallel()
	testTogglesRoundTrip(t, newSetup(t))
}

func TestPostgresToggles(t *testing.T) {
	t.Parallel()
	s := newPostgresSetup(t)
	testTogglesRoundTrip(t, s)
	before := storedToggles(t, s)
	r := s.run("toggles", "set", "balance.credt.v1", "off", "--reason", "typo")
	wantError(t, r, ExitUsage, "did you mean balance.credit.v1")
	sameToggles(t, s, before)
}

func testTogglesRoundTrip(t *testing.T, s *setup) {
	// Before any switch: defaults, the fail-closed credit off.
	r := s.ok("toggles", "ls")
	for kind, want := range map[string][]string{
		"balance.credit.v1":             {"off", "default", "yes"},
		"email.partner-verification.v1": {"on", "default", "no"},
		"ads.image-watermark.v1":        {"on", "default", "no"},
	} {
		if got := strings.Fields(tableLine(t, r.stdout, kind))[1:4]; strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("toggles ls: %s is %q, want %q\n%s", kind, got, want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "no known kind") {
		t.Errorf("toggles ls lists unknown keys with none stored:\n%s", r.stdout)
	}

	r = s.ok("toggles", "set", "email.partner-verification.v1", "off", "--reason", "incident 42", "--by", "ops@host")
	for _, want := range []string{"email.partner-verification.v1 off (store by ops@host", `"incident 42"`, "within about 1s"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("set prints %q, lacking %q", r.stdout, want)
		}
	}
	r = s.ok("toggles", "set", "balance.credit.v1", "on", "--reason", "ledger ready")
	if !strings.Contains(r.stdout, "balance.credit.v1 on (store by ") {
		t.Errorf("set on prints %q", r.stdout)
	}

	rows := lsRows(t, s)
	email := rows["email.partner-verification.v1"]
	if email.State != "off" || email.DecidedBy != "store" || email.Store == nil ||
		email.Store.By != "ops@host" || email.Store.Reason != "incident 42" || email.Store.At.IsZero() {
		t.Errorf("email after set off: %+v (store %+v)", email, email.Store)
	}
	credit := rows["balance.credit.v1"]
	if credit.State != "on" || credit.DecidedBy != "store" || credit.FailClosed == nil || !*credit.FailClosed {
		t.Errorf("credit after set on: %+v", credit)
	}
	if credit.Store == nil || !strings.Contains(credit.Store.By, "@") {
		t.Errorf("credit's --by default is not user@host: %+v", credit.Store)
	}
	if ads := rows["ads.image-watermark.v1"]; ads.State != "on" || ads.DecidedBy != "default" || ads.Store != nil {
		t.Errorf("ads untouched: %+v", ads)
	}
	r = s.ok("toggles", "ls")
	if l := tableLine(t, r.stdout, "email.partner-verification.v1"); !strings.Contains(l, "ops@host") || !strings.Contains(l, `"incident 42"`) {
		t.Errorf("ls line lacks who and why: %q", l)
	}

	r = s.ok("toggles", "unset", "email.partner-verification.v1")
	if !strings.Contains(r.stdout, "email.partner-verification.v1 on (default)") {
		t.Errorf("unset prints %q", r.stdout)
	}
	r = s.ok("toggles", "unset", "balance.credit.v1")
	if !strings.Contains(r.stdout, "balance.credit.v1 off (default: fail-closed)") {
		t.Errorf("unset of the fail-closed kind prints %q", r.stdout)
	}
	if got := storedToggles(t, s); len(got) != 0 {
		t.Errorf("after unset the store holds %q", got)
	}
	wantError(t, s.run("toggles", "unset", "balance.credit.v1"), ExitFailure, "nothing to unset")
}

func TestTogglesSetRefusesBadInput(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	s.ok("toggles", "set", "ads.image-watermark.v1", "off", "--reason", "before")
	before := storedToggles(t, s)
	for _, tc := range []struct {
		args  []string
		wants []string
	}{
		{[]string{"balance.credit.v1", "off"}, []string{"--reason is required"}},
		{[]string{"balance.credit.v1", "off", "--reason", "  "}, []string{"--reason is required"}},
		{[]string{"balance.credt.v1", "off", "--reason", "incident"}, []string{"did you mean balance.credit.v1?", "--force"}},
		{[]string{"nothing.like.it.v1", "off", "--reason", "incident"}, []string{"neither registered", "--force"}},
		{[]string{"balance.credit.v1", "disable", "--reason", "incident"}, []string{`"disable"`, "on or off"}},
		{[]string{"balance.credit.v1", "true", "--reason", "incident"}, []string{"on or off"}},
		{[]string{"Balance.Credit.v1", "off", "--reason", "incident"}, []string{"upper-case"}},
		{[]string{"balance.credit", "off", "--reason", "incident"}, []string{"not versioned"}},
		{[]string{"balance.credit.v1", "off", "--reason", "incident", "--by", ""}, []string{"--by is empty"}},
		{[]string{"balance.credit.v1"}, []string{"takes 2 arguments"}},
	} {
		r := s.run(append([]string{"toggles", "set"}, tc.args...)...)
		wantError(t, r, ExitUsage, tc.wants...)
		if r.stdout != "" {
			t.Errorf("set %q printed %q", tc.args, r.stdout)
		}
	}
	sameToggles(t, s, before)
	if strings.Contains(s.ok("toggles", "ls").stdout, "did you mean") {
		t.Error("a refused set left an unknown key behind")
	}
	wantError(t, s.run("toggles"), ExitUsage, "missing subcommand")
	wantError(t, s.run("toggles", "flip"), ExitUsage, "unknown command")
}

func TestTogglesForceStoresAnUnknownKey(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	r := s.ok("toggles", "set", "balance.credt.v1", "off", "--reason", "typo on purpose", "--force")
	if !strings.Contains(r.stdout, "balance.credt.v1 off (store") || !strings.Contains(r.stdout, "no effect") {
		t.Errorf("forced set prints %q", r.stdout)
	}
	rows := lsRows(t, s)
	u, ok := rows["balance.credt.v1"]
	if !ok || u.Known || u.Suggestion != "balance.credit.v1" || u.Store == nil || u.Store.Enabled {
		t.Errorf("forced key in ls --json: %+v (present %v)", u, ok)
	}
	if c := rows["balance.credit.v1"]; c.State != "off" || c.DecidedBy != "default" {
		t.Errorf("the typo switched the real kind: %+v", c)
	}
	r = s.ok("toggles", "ls")
	if l := tableLine(t, r.stdout, "balance.credt.v1"); !strings.Contains(l, "did you mean balance.credit.v1?") || !strings.Contains(l, "off") {
		t.Errorf("unknown key line: %q\n%s", l, r.stdout)
	}
	if !strings.Contains(r.stdout, "1 toggle key names no known kind") {
		t.Errorf("ls does not announce the unknown key:\n%s", r.stdout)
	}
	s.ok("toggles", "unset", "balance.credt.v1")
	if _, ok := lsRows(t, s)["balance.credt.v1"]; ok {
		t.Error("unset left the forced key")
	}
}

func TestTogglesFile(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "toggles.toml")
	if err := os.WriteFile(file, []byte(`[toggles]
"email.partner-verfication.v1" = false
"ads.image-watermark.v1" = false
"balance.credit.v1" = true
`), 0o600); err != nil {
		t.Fatal(err)
	}
	s.ok("toggles", "set", "balance.credit.v1", "off", "--reason", "store says off")
	rows := lsRows(t, s, "--file", file)
	if ads := rows["ads.image-watermark.v1"]; ads.State != "off" || ads.DecidedBy != "file" || ads.File == nil || *ads.File {
		t.Errorf("ads, off in the file: %+v", ads)
	}
	if c := rows["balance.credit.v1"]; c.State != "off" || c.DecidedBy != "store" || c.File == nil || !*c.File {
		t.Errorf("credit, on in the file and off in the store (off wins): %+v", c)
	}
	u, ok := rows["email.partner-verfication.v1"]
	if !ok || u.Known || u.Suggestion != "email.partner-verification.v1" || u.File == nil || *u.File || u.Store != nil {
		t.Errorf("typo'd file key: %+v (present %v)", u, ok)
	}
	r := s.ok("toggles", "ls", "--file", file)
	if l := tableLine(t, r.stdout, "email.partner-verfication.v1"); !strings.Contains(l, "did you mean email.partner-verification.v1?") {
		t.Errorf("file's unknown key line: %q", l)
	}

	// set with --file shows the effective state, the file included.
	r = s.ok("toggles", "set", "ads.image-watermark.v1", "on", "--reason", "back", "--file", file)
	if !strings.Contains(r.stdout, "ads.image-watermark.v1 off (file)") || !strings.Contains(r.stdout, "the file's off wins") {
		t.Errorf("set on against a file's off prints %q", r.stdout)
	}

	// A missing file has no toggles.
	rows = lsRows(t, s, "--file", filepath.Join(dir, "absent.toml"))
	if ads := rows["ads.image-watermark.v1"]; ads.State != "on" || ads.File != nil {
		t.Errorf("ads with a missing file: %+v", ads)
	}

	bad := filepath.Join(dir, "bad.toml")
	if err := os.WriteFile(bad, []byte("[toggles]\n\"a.b.v1\" = \"off\"\nnot toml at all\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"ls"}, {"ls", "--json"}} {
		r := s.run(append(append([]string{"toggles"}, args...), "--file", bad)...)
		wantError(t, r, ExitFailure, "toggles file", "bad.toml", "line 3")
		if r.stdout != "" {
			t.Errorf("ls with a malformed file printed %q", r.stdout)
		}
	}
	before := storedToggles(t, s)
	wantError(t, s.run("toggles", "set", "email.partner-verification.v1", "off", "--reason", "x", "--file", bad), ExitFailure, "toggles file")
	sameToggles(t, s, before)
}

// TestTogglesKnowsLiveWorkersKinds: a kind this binary does not register
// but a live worker handles may be switched without --force, and its
// fail-closed default is shown as unknown.
func TestTogglesKnowsLiveWorkersKinds(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	store, err := (&cli{db: s.db}).openStore(t.Context(), false)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, n := range []*twicetype.Node{
		{ID: "live", Host: "h", PID: 1, Kinds: []string{"reports.nightly.v1"}, StartedAt: now, HeartbeatAt: now},
		{ID: "gone", Host: "h", PID: 2, Kinds: []string{"reports.weekly.v1"}, StartedAt: now.Add(-time.Hour), HeartbeatAt: now.Add(-time.Hour)},
	} {
		if err := store.NodeHeartbeat(t.Context(), &twicestore.NodeHeartbeatParams{Node: n}); err != nil {
			t.Fatal(err)
		}
	}
	store.Close()

	rows := lsRows(t, s)
	n, ok := rows["reports.nightly.v1"]
	if !ok || !n.Known || !n.Live || n.Registered || n.State != "?" || n.FailClosed != nil {
		t.Errorf("live worker's kind: %+v (present %v)", n, ok)
	}
	if _, ok := rows["reports.weekly.v1"]; ok {
		t.Error("a dead worker's kind is listed as known")
	}
	r := s.ok("toggles", "ls")
	if f := strings.Fields(tableLine(t, r.stdout, "reports.nightly.v1")); f[1] != "?" || f[3] != "?" {
		t.Errorf("live worker's kind line: %q", f)
	}

	s.ok("toggles", "set", "reports.nightly.v1", "off", "--reason", "slow")
	if n := lsRows(t, s)["reports.nightly.v1"]; n.State != "off" || n.DecidedBy != "store" {
		t.Errorf("live worker's kind after set off: %+v", n)
	}
	wantError(t, s.run("toggles", "set", "reports.weekly.v1", "off", "--reason", "slow"), ExitUsage, "neither registered")
}
