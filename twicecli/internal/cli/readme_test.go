package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/twicejobs/twice/twicetype"
)

// TestListingFilterNamesNothing (issue 20 #15): a listing or a bulk
// action whose --kind or --queue names no known kind or queue exits 2
// naming the closest known one, as the README says, instead of "no jobs
// match"; a known kind with no matching job, or a kind only jobs carry,
// still lists nothing with exit 0.
func TestListingFilterNamesNothing(t *testing.T) {
	t.Parallel()
	s, before := withJob(t)
	for _, tc := range []struct {
		args  []string
		wants []string
	}{
		{[]string{"jobs", "--kind", "email.partner-verfication.v1"}, []string{"no such kind", "did you mean " + emailKind + "?"}},
		{[]string{"jobs", "--queue", "defualt"}, []string{"no such queue", "did you mean default?"}},
		{[]string{"dlq", "ls", "--kind", "email.partner-verfication.v1"}, []string{"no such kind", "did you mean " + emailKind + "?"}},
		{[]string{"jobs", "cancel", "--all", "--state", "available", "--queue", "defualt", "--reason", "x"}, []string{"no such queue", "did you mean default?"}},
	} {
		wantError(t, s.run(tc.args...), ExitUsage, tc.wants...)
	}
	sameJobs(t, s.db, before)
	for _, args := range [][]string{
		{"jobs", "--kind", emailKind, "--state", "dead"},
		{"dlq", "ls", "--queue", "default"},
	} {
		if r := s.ok(args...); r.stdout != "no jobs match\n" {
			t.Errorf("%v: %q, want no jobs match", args, r.stdout)
		}
	}
	// A kind no catalog or registry knows, but jobs carry: a filter on it
	// is no typo.
	s.ok("enqueue", "legacy.report.v1", `{"n": 1}`, "--force")
	if r := s.ok("jobs", "--kind", "legacy.report.v1", "--state", "dead"); r.stdout != "no jobs match\n" {
		t.Errorf("a kind only jobs carry: %q", r.stdout)
	}
}

// TestMissingJobIsUsage (issue 20 #15): the README gives ErrJobNotFound
// the CLI's exit 2: jobs show, and an action on ids none of which exist.
func TestMissingJobIsUsage(t *testing.T) {
	t.Parallel()
	s, _ := withJob(t)
	wantError(t, s.run("jobs", "show", "999"), ExitUsage, "job 999: job not found")
	wantError(t, s.run("jobs", "cancel", "998", "999", "--reason", "x"), ExitUsage, "job 998: job not found", "job 999: job not found")
	wantError(t, s.run("workflows", "show", "9"), ExitUsage, "workflow 9 not found")
	// One job that exists and one that does not: the command did part of
	// its work, a runtime failure.
	wantError(t, s.run("jobs", "cancel", "1", "999", "--reason", "x"), ExitFailure, "job 999: job not found")
}

// TestStockRecurringPublishedSchedule (issue 20 #15): a schedule the stock
// binary lists from the kind catalog (its worker has not ticked it yet)
// is no "unknown schedule" to trigger or rm: they say what is true and
// what to do; a name nothing lists is unknown, with the closest name.
func TestStockRecurringPublishedSchedule(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	publishCatalog(t, s, "reports-worker", time.Now(), twicetype.KindInfo{Kind: "reports.nightly.v1", Queue: "default",
		Schedules: []twicetype.KindSchedule{{Name: "nightly-report", Spec: "0 3 * * *"}}})
	stock := func(args ...string) result {
		return runStock(t, t.Context(), append(args, "--db", s.db)...)
	}
	if r := stock("recurring", "ls"); r.code != ExitOK || !strings.Contains(r.stdout, "nightly-report") {
		t.Fatalf("recurring ls: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, verb := range []string{"trigger", "rm"} {
		r := stock("recurring", verb, "nightly-report", "--reason", "x")
		wantError(t, r, ExitFailure, "nightly-report", "reports.nightly.v1", "catalog")
		if strings.Contains(r.stderr, "unknown schedule") {
			t.Errorf("recurring %s of a listed schedule: %s", verb, r.stderr)
		}
		wantError(t, stock("recurring", verb, "nightly-reprot", "--reason", "x"), ExitUsage, "unknown schedule", "did you mean nightly-report?")
	}
}

// TestBinaryName (issue 20 #15): a team's binary calls itself by its own
// name in its usage, examples, hints and error lines, not "twice".
func TestBinaryName(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	acme := func(args ...string) result {
		return runWith(t, t.Context(), Options{Name: "acme-ops"}, append(args, "--db", s.db)...)
	}
	r := acme("workflows", "show", "x")
	if r.code != ExitUsage || r.stderr != `acme-ops: "x" is not a workflow id: use a positive integer (see 'acme-ops workflows ls') (see 'acme-ops workflows show --help')`+"\n" {
		t.Errorf("a usage error: %d %q", r.code, r.stderr)
	}
	r = acme("jobs", "--help")
	if !strings.Contains(r.stdout, "  acme-ops jobs [flags]") || !strings.Contains(r.stdout, "  acme-ops jobs --state dead") || strings.Contains(r.stdout, "twice jobs") {
		t.Errorf("jobs --help of a binary called acme-ops:\n%s", r.stdout)
	}
	r = runWith(t, t.Context(), Options{Name: "acme-ops"}, "jobs", "--db", s.db+".absent")
	if !strings.HasPrefix(r.stderr, "acme-ops: ") || !strings.Contains(r.stderr, "'acme-ops migrate --db ") {
		t.Errorf("a missing database: %q", r.stderr)
	}
}

// TestPauseUntilSaysWhatIsTrue (issue 20 #15): queues ls says an
// open-ended pause is open-ended (not "UNTIL resumed"), and an --until or
// --expires past a sane bound (ten years; 9223372036s overflows nothing
// but means nothing) is a usage error that says what to do.
func TestPauseUntilSaysWhatIsTrue(t *testing.T) {
	t.Parallel()
	s, before := withJob(t)
	s.ok("queues", "pause", "default", "--reason", "incident 42")
	if l := tableLine(t, s.ok("queues", "ls").stdout, "default"); !strings.Contains(l, "open-ended") || strings.Contains(l, "resumed") {
		t.Errorf("queues ls line of an open-ended pause: %q", l)
	}
	s.ok("queues", "resume", "default")
	for _, args := range [][]string{
		{"queues", "pause", "default", "--reason", "x", "--until", "9223372036s"},
		{"queues", "pause", "default", "--reason", "x", "--until", "9999-12-31T00:00:00Z"},
		{"toggles", "set", emailKind, "off", "--reason", "x", "--expires", "9223372036s"},
	} {
		wantError(t, s.run(args...), ExitUsage, "more than 10 years", "leave it out")
	}
	sameJobs(t, s.db, before)
	if r := s.ok("queues", "ls", "--json"); strings.Contains(r.stdout, `"paused": true`) {
		t.Errorf("a refused pause paused the queue:\n%s", r.stdout)
	}
}
