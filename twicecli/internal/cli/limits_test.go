package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/testkit/limitstest"
)

// limitedWorker opens the store at db and starts the limited worker of
// limitstest on it (tenant.sync.v1: two jobs running, two throttled), and
// returns its registry, for the CLI under test.
func limitedWorker(t *testing.T, db string) *twice.Registry {
	t.Helper()
	return limitstest.StartWorker(t, openTestStore(t, db))
}

func TestLimitsList(t *testing.T) {
	t.Parallel()
	testLimitsList(t, newSetup(t))
}

func TestPostgresLimitsList(t *testing.T) {
	t.Parallel()
	testLimitsList(t, newPostgresSetup(t))
}

// testLimitsList (issue 13 item 6): 'limits ls' shows a limited kind's
// limits, its running jobs against its slots, and acme's two later jobs as
// throttled (waiting for acme's slot), in the table and in JSON.
func testLimitsList(t *testing.T, s *setup) {
	reg := limitedWorker(t, s.db)
	opts := Options{Registry: reg}
	run := func(args ...string) result {
		t.Helper()
		r := runWith(t, t.Context(), opts, append(args, "--db", s.db)...)
		if r.code != ExitOK {
			t.Fatalf("twice %s: exit %d\n%s%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
		}
		return r
	}

	var got []limitJSON
	if err := json.Unmarshal([]byte(run("limits", "ls", "--json").stdout), &got); err != nil {
		t.Fatal(err)
	}
	want := limitJSON{Kind: "tenant.sync.v1", GlobalConcurrency: 2, KeyConcurrency: 1, KeyOrderSkipsRetries: true,
		RateLimit: &rateJSON{Limit: 100, Period: "1h"},
		Running:   2, Due: 2, Throttled: 2, Keys: 2, BusyKeys: 2, RateUsed: 2}
	if len(got) != 1 || got[0].RateLimit == nil || *got[0].RateLimit != *want.RateLimit ||
		got[0].KeyRateLimit != nil {
		t.Fatalf("limits ls --json = %+v, want [%+v]", got, want)
	}
	got[0].RateLimit = want.RateLimit
	if c := got[0].Compiled; c == nil || c.GlobalConcurrency == nil || *c.GlobalConcurrency != 2 || got[0].Override != nil {
		t.Errorf("limits ls --json compiled %+v override %+v, want the compiled global 2 and no override", c, got[0].Override)
	}
	got[0].Compiled = nil
	if got[0] != want {
		t.Errorf("limits ls --json = %+v, want %+v", got[0], want)
	}
	// snake_case keys, as every --json prints.
	raw := run("limits", "ls", "--json").stdout
	for _, key := range []string{`"global_concurrency"`, `"key_concurrency"`, `"rate_limit"`, `"busy_keys"`, `"rate_used"`, `"throttled"`} {
		if !strings.Contains(raw, key) {
			t.Errorf("limits ls --json lacks key %s:\n%s", key, raw)
		}
	}

	out := run("limits", "ls").stdout
	if !strings.HasPrefix(out, "KIND ") || !strings.Contains(out, "THROTTLED") {
		t.Errorf("limits ls has no header:\n%s", out)
	}
	line := tableLine(t, out, "tenant.sync.v1")
	for _, w := range []string{"global 2, per key 1, retries out of key order, rate 100/1h", " 2/2 ", " 2 of 2 ", "2/100 per 1h"} {
		if !strings.Contains(line, w) {
			t.Errorf("limits ls line %q lacks %q", line, w)
		}
	}
}

// TestLimitsListBadInput: the stock binary knows no limits and says so;
// an extra argument or a bad flag is a usage error.
func TestLimitsListBadInput(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	r := runStock(t, t.Context(), "limits", "ls", "--db", s.db)
	if r.code != ExitOK || !strings.Contains(r.stdout, "no limited kinds") {
		t.Errorf("stock limits ls: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	r = runStock(t, t.Context(), "limits", "ls", "--json", "--db", s.db)
	if r.code != ExitOK || strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("stock limits ls --json: exit %d %q, want []", r.code, r.stdout)
	}
	wantError(t, s.run("limits", "ls", "extra"), ExitUsage)
	wantError(t, s.run("limits", "ls", "--bogus"), ExitUsage)
	wantError(t, s.run("limits"), ExitUsage, "missing subcommand")
}
