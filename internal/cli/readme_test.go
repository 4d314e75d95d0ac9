package cli

import (
	"testing"
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
