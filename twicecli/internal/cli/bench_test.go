package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twicejobs/twice/internal/testkit/pgtest"
)

func TestBenchBadInput(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "bench.db")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bench"}, "takes one mode"},
		{[]string{"bench", "burndown", "steady"}, "takes one mode"},
		{[]string{"bench", "burndwon"}, `unknown mode "burndwon"`},
		{[]string{"bench", "burndown", "--strategy", "claim-before"}, `strategy "claim-before": use none, claim-after or transactional`},
		{[]string{"bench", "burndown", "--jobs", "0"}, "--jobs 0: give a positive number"},
		{[]string{"bench", "burndown", "--jobs", "-5"}, "--jobs -5"},
		{[]string{"bench", "burndown", "--jobs", "many"}, `invalid argument "many"`},
		{[]string{"bench", "burndown", "--workers", "0"}, "--workers 0"},
		{[]string{"bench", "burndown", "--duration", "5s"}, "--duration does not apply to burndown"},
		{[]string{"bench", "steady", "--jobs", "10"}, "--jobs does not apply to steady"},
		{[]string{"bench", "steady", "--rate", "10"}, "--rate does not apply to steady"},
		{[]string{"bench", "steady", "--duration", "0s"}, "--duration 0s"},
		{[]string{"bench", "latency", "--duration", "-1s"}, "--duration -1s"},
		{[]string{"bench", "latency", "--rate", "0"}, "--rate 0"},
		{[]string{"bench", "latency", "--rate", "1000000"}, "at most 100000"},
	} {
		r := runCLI(t, t.Context(), append(tc.args, "--db", db)...)
		wantError(t, r, ExitUsage, tc.want)
	}
	if _, err := os.Stat(db); err == nil {
		t.Error("a refused bench created the database")
	}
}

// benchSummary checks r succeeded with one JSON summary line on stdout and
// returns it.
func benchSummary(t *testing.T, r result) map[string]any {
	t.Helper()
	if r.code != ExitOK {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if strings.Count(r.stdout, "\n") != 1 {
		t.Fatalf("stdout is not one line: %q", r.stdout)
	}
	var sum map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &sum); err != nil {
		t.Fatalf("summary %q: %v", r.stdout, err)
	}
	for _, k := range []string{"mode", "strategy", "jobs", "seconds", "jobs_per_s", "p50_ms", "p99_ms", "max_rss_mb"} {
		if _, ok := sum[k]; !ok {
			t.Errorf("summary %q has no %q", r.stdout, k)
		}
	}
	return sum
}

func TestBenchRuns(t *testing.T) {
	t.Parallel()
	dbs := map[string]string{"sqlite": filepath.Join(t.TempDir(), "bench.db")}
	if os.Getenv(pgtest.EnvURL) != "" {
		dbs["postgres"], _ = pgtest.Schema(t, "cli_bench")
	}
	for name, db := range dbs {
		t.Run(name, func(t *testing.T) {
			for _, strategy := range []string{"none", "claim-after", "transactional"} {
				sum := benchSummary(t, runCLI(t, t.Context(), "bench", "burndown", "--jobs", "300", "--workers", "4", "--strategy", strategy, "--db", db))
				if sum["mode"] != "burndown" || sum["strategy"] != strategy || sum["jobs"] != 300.0 {
					t.Errorf("summary %v: want burndown of 300 %s jobs", sum, strategy)
				}
			}
			sum := benchSummary(t, runCLI(t, t.Context(), "bench", "steady", "--duration", "300ms", "--workers", "4", "--db", db))
			if sum["mode"] != "steady" {
				t.Errorf("summary %v: want mode steady", sum)
			}
			sum = benchSummary(t, runCLI(t, t.Context(), "bench", "latency", "--duration", "300ms", "--rate", "50", "--db", db))
			if sum["mode"] != "latency" || sum["jobs"].(float64) < 1 {
				t.Errorf("summary %v: want a latency run of at least one job", sum)
			}
		})
	}
}
