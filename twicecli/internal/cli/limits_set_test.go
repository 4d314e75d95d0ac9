package cli

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestLimitsSet(t *testing.T) {
	t.Parallel()
	testLimitsSet(t, newSetup(t))
}

func TestPostgresLimitsSet(t *testing.T) {
	t.Parallel()
	testLimitsSet(t, newPostgresSetup(t))
}

// testLimitsSet: the stock binary, which registers no kind, lists the
// limits a live worker publishes; it overrides a kind's limits and a
// queue's concurrency, shows the override against the compiled limits,
// lists the changes in the history with who and why, and resets them.
func testLimitsSet(t *testing.T, s *setup) {
	limitedWorker(t, s.db)
	run := func(args ...string) result {
		t.Helper()
		r := runStock(t, t.Context(), append(args, "--db", s.db)...)
		if r.code != ExitOK {
			t.Fatalf("twice %s: exit %d\n%s%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
		}
		return r
	}
	line := tableLine(t, run("limits", "ls").stdout, "tenant.sync.v1")
	if !strings.Contains(line, "global 2, per key 1") || !strings.Contains(line, " 2/2 ") {
		t.Errorf("stock limits ls line %q lacks the published limits", line)
	}

	out := run("limits", "set", "tenant.sync.v1", "--global", "3", "--rate", "50/m", "--reason", "catch up", "--by", "alice").stdout
	if !strings.Contains(out, "limits now global 3, per key 1, retries out of key order, rate 50/1m") {
		t.Errorf("limits set printed %q", out)
	}
	var got []limitJSON
	if err := json.Unmarshal([]byte(run("limits", "ls", "--json").stdout), &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].GlobalConcurrency != 3 || got[0].RateLimit == nil || got[0].RateLimit.Limit != 50 ||
		got[0].Compiled == nil || *got[0].Compiled.GlobalConcurrency != 2 ||
		got[0].Override == nil || got[0].Override.By != "alice" || got[0].Override.Reason != "catch up" {
		t.Fatalf("limits ls --json after the set = %+v", got)
	}
	run("queues", "scale", "default", "4", "--reason", "backlog", "--by", "bob")
	table := run("limits", "ls").stdout
	if line := tableLine(t, table, "tenant.sync.v1"); !strings.Contains(line, "by alice") || !strings.Contains(line, "compiled: global 2") {
		t.Errorf("limits ls line %q does not show the override against the compiled limits", line)
	}
	if line := tableLine(t, table, "default"); !strings.Contains(line, " 4 ") || !strings.Contains(line, "bob") {
		t.Errorf("limits ls queue line %q does not show default's concurrency 4 by bob", line)
	}

	run("limits", "reset", "tenant.sync.v1", "--reason", "caught up", "--by", "carol")
	run("queues", "scale", "default", "reset", "--reason", "done", "--by", "carol")
	var history []limitChangeJSON
	if err := json.Unmarshal([]byte(run("limits", "history", "--json").stdout), &history); err != nil {
		t.Fatal(err)
	}
	var who []string
	for _, ch := range history {
		who = append(who, ch.By+" "+ch.Scope+" "+ch.Name+" "+ch.Reason)
	}
	want := "carol queue default done; carol kind tenant.sync.v1 caught up; bob queue default backlog; alice kind tenant.sync.v1 catch up"
	if strings.Join(who, "; ") != want {
		t.Errorf("limits history --json =\n%s\nwant\n%s", strings.Join(who, "; "), want)
	}
	if history[1].New != nil || history[1].Previous == nil || *history[1].Previous.GlobalConcurrency != 3 {
		t.Errorf("the reset's change = %+v, want previous global 3 and no new", history[1])
	}
	if out := run("limits", "history", "tenant.sync.v1").stdout; !strings.Contains(out, "compiled → global 3") ||
		!strings.Contains(out, "→ compiled") || strings.Contains(out, "queue") {
		t.Errorf("limits history KIND:\n%s", out)
	}
	line = tableLine(t, run("limits", "ls").stdout, "tenant.sync.v1")
	if !strings.Contains(line, "global 2, per key 1") || !strings.HasSuffix(strings.TrimSpace(line), "-") {
		t.Errorf("after the reset limits ls line %q, want the compiled limits and no override", line)
	}
}

// TestLimitsSetBadInput: an unknown kind or queue, a bad number or rate,
// no reason, nothing to set: exit 2, and nothing changed.
func TestLimitsSetBadInput(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	kind := "ads.image-watermark.v1" // a demo kind: registered in runCLI's binary
	for _, c := range []struct {
		args  []string
		wants []string
	}{
		{[]string{"limits", "set", "ads.image-watermak.v1", "--global", "2", "--reason", "r"}, []string{"did you mean " + kind}},
		{[]string{"limits", "set", kind, "--global", "two", "--reason", "r"}, []string{"--global"}},
		{[]string{"limits", "set", kind, "--global", "-1", "--reason", "r"}, []string{"negative"}},
		{[]string{"limits", "set", kind, "--rate", "5", "--reason", "r"}, []string{"N/PERIOD"}},
		{[]string{"limits", "set", kind, "--rate", "5/fortnight", "--reason", "r"}, []string{"fortnight"}},
		{[]string{"limits", "set", kind, "--rate", "0/1s", "--reason", "r"}, []string{"N/PERIOD"}},
		{[]string{"limits", "set", kind, "--global", "2"}, []string{"--reason is required"}},
		{[]string{"limits", "set", kind, "--reason", "r"}, []string{"nothing to set"}},
		{[]string{"limits", "set", kind, "--per-key", "1", "--reason", "r"}, []string{"no concurrency key"}},
		{[]string{"limits", "set", kind, "--global", "2", "--reason", "a\x00b"}, []string{"reason"}},
		{[]string{"limits", "reset", kind, "--reason", "r"}, []string{"no limit override"}},
		{[]string{"queues", "scale", "default", "0", "--reason", "r"}, []string{"from 1 to"}},
		{[]string{"queues", "scale", "default", "lots", "--reason", "r"}, []string{"not a concurrency"}},
		{[]string{"queues", "scale", "nowhere", "2", "--reason", "r"}, []string{"nowhere"}},
		{[]string{"queues", "scale", "default", "2"}, []string{"--reason is required"}},
		{[]string{"queues", "scale", "default", "reset", "--reason", "r"}, []string{"no limit override"}},
		{[]string{"limits", "history", "a.v1", "b.v1"}, []string{"at most one KIND"}},
		{[]string{"limits", "history", kind, "--queue", "default"}, []string{"both a kind and a queue"}},
	} {
		t.Run(strings.Join(c.args[:3], " "), func(t *testing.T) {
			wantError(t, s.run(c.args...), ExitUsage, c.wants...)
		})
	}
	if out := s.ok("limits", "history").stdout; !strings.Contains(out, "no limit changes recorded") {
		t.Errorf("after refused commands limits history = %q, want none", out)
	}
}
