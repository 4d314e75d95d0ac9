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
	defer func() { _ = store.Close() }()
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
func lsRows(t *testing.T, s *setup, args ...string) map[string]toggleJSON {
	t.Helper()
	r := s.ok(append([]string{"toggles", "ls", "--json"}, args...)...)
	var rows []toggleJSON
	if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil {
		t.Fatalf("toggles ls --json is not JSON: %v\n%s", err, r.stdout)
	}
	m := map[string]toggleJSON{}
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
	wantError(t, s.run("toggles", "unset", "balance.credit.v1"), ExitUsage, "nothing to unset")
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
		{[]string{"nothing.like.it.v1", "off", "--reason", "incident"}, []string{"in no catalog", "--force"}},
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
	if !strings.Contains(r.stdout, "balance.credt.v1 off (store") || !strings.Contains(r.stdout, "no effect until a worker for it starts") {
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

// publishCatalog records kinds in s's catalog as a worker of another
// binary does at its start and heartbeats: at, with node's id.
func publishCatalog(t *testing.T, s *setup, node string, at time.Time, kinds ...twicetype.KindInfo) {
	t.Helper()
	store, err := (&cli{db: s.db}).openStore(t.Context(), false)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = store.Close() }()
	if err := store.CatalogPublish(t.Context(), &twicestore.CatalogPublishParams{Node: node, Now: at, Kinds: kinds}); err != nil {
		t.Fatal(err)
	}
}

// TestTogglesKnowsCataloguedKinds (issue 11 item 1): a kind this binary
// does not register but a worker published to the catalog, live or not,
// shows with its effective state and fail-closed flag, and may be switched
// without --force; a kind in no catalog needs --force.
func TestTogglesKnowsCataloguedKinds(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	now := time.Now()
	publishCatalog(t, s, "live", now, twicetype.KindInfo{Kind: "reports.nightly.v1", Queue: "default", FailClosed: true, MaxAttempts: 3})
	publishCatalog(t, s, "gone", now.Add(-time.Hour), twicetype.KindInfo{Kind: "reports.weekly.v1", Queue: "default", MaxAttempts: 3})

	rows := lsRows(t, s)
	n, ok := rows["reports.nightly.v1"]
	if !ok || !n.Known || !n.Live || !n.Catalogued || n.Registered || n.State != "off" || n.DecidedBy != "default" || n.FailClosed == nil || !*n.FailClosed {
		t.Errorf("live worker's fail-closed kind: %+v (present %v)", n, ok)
	}
	w, ok := rows["reports.weekly.v1"]
	if !ok || !w.Known || w.Live || !w.Catalogued || w.State != "on" || w.FailClosed == nil || *w.FailClosed || w.LastSeen == nil {
		t.Errorf("a stopped worker's kind: %+v (present %v)", w, ok)
	}
	r := s.ok("toggles", "ls")
	if f := strings.Fields(tableLine(t, r.stdout, "reports.nightly.v1")); f[1] != "off" || f[3] != "yes" {
		t.Errorf("catalogued fail-closed kind line: %q", f)
	}
	if strings.Contains(r.stdout, "?") {
		t.Errorf("toggles ls still shows an unknown state or flag:\n%s", r.stdout)
	}

	s.ok("toggles", "set", "reports.nightly.v1", "on", "--reason", "ready")
	if n := lsRows(t, s)["reports.nightly.v1"]; n.State != "on" || n.DecidedBy != "store" {
		t.Errorf("catalogued kind after set on: %+v", n)
	}
	r = s.ok("toggles", "set", "reports.weekly.v1", "off", "--reason", "slow")
	if !strings.Contains(r.stdout, "no live worker handles reports.weekly.v1") {
		t.Errorf("set of a kind whose workers are gone does not say so: %q", r.stdout)
	}
	wantError(t, s.run("toggles", "set", "reports.monthly.v1", "off", "--reason", "slow"), ExitUsage, "in no catalog")
}

// TestTogglesExpiryAndHistory (issue 11 items 3 and 4): a switch may
// expire; the history says who flipped it before the last flip; bad input
// (an expiry in the past, a history of an unknown kind) exits 2 and
// changes nothing.
func TestTogglesExpiryAndHistory(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	const kind = "email.partner-verification.v1"
	s.ok("toggles", "set", kind, "off", "--reason", "incident 42", "--by", "alice@ops")
	r := s.ok("toggles", "set", kind, "off", "--reason", "maintenance", "--by", "bob@ops", "--expires", "2h")
	if !strings.Contains(r.stdout, "stored "+kind+" off until ") {
		t.Errorf("set --expires prints %q", r.stdout)
	}
	row := lsRows(t, s)[kind]
	if row.Store == nil || row.Store.ExpiresAt == nil || row.Store.ExpiresAt.Before(time.Now().Add(time.Hour)) {
		t.Errorf("ls --json of an expiring switch: %+v", row.Store)
	}
	s.ok("toggles", "unset", kind, "--reason", "over", "--by", "carol@ops")

	var changes []toggleChangeJSON
	if err := json.Unmarshal([]byte(s.ok("toggles", "history", kind, "--json").stdout), &changes); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ch := range changes {
		got = append(got, fmt.Sprintf("%s %s>%s %q %v", ch.By, ch.Previous, ch.New, ch.Reason, ch.ExpiresAt != nil))
	}
	want := []string{`carol@ops off>none "over" false`, `bob@ops off>off "maintenance" true`, `alice@ops none>off "incident 42" false`}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("history, newest first:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	table := s.ok("toggles", "history", kind).stdout
	for _, want := range []string{"alice@ops", "none → off", `"incident 42"`, "bob@ops", "carol@ops"} {
		if !strings.Contains(table, want) {
			t.Errorf("history table lacks %q:\n%s", want, table)
		}
	}
	if !strings.Contains(s.ok("toggles", "history", "ads.image-watermark.v1").stdout, "no switch changes recorded") {
		t.Error("history of a known kind never switched")
	}

	before := storedToggles(t, s)
	wantError(t, s.run("toggles", "history", "email.partner-verfication.v1"), ExitUsage, "did you mean "+kind)
	wantError(t, s.run("toggles", "set", kind, "off", "--reason", "x", "--expires", "2020-01-01T00:00:00Z"), ExitUsage, "not in the future")
	wantError(t, s.run("toggles", "set", kind, "off", "--reason", "x", "--expires", "-5m"), ExitUsage, "not in the future")
	wantError(t, s.run("toggles", "set", kind, "off", "--reason", "x", "--expires", "soon"), ExitUsage, "--expires")
	sameToggles(t, s, before)
	if n := len(lsRows(t, s)); n == 0 {
		t.Error("no rows")
	}
}
