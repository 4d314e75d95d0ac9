package cli

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/testkit/whytest"
	"github.com/twicejobs/twice/twicemysql"
	"github.com/twicejobs/twice/twicepg"
	"github.com/twicejobs/twice/twicesqlite"
	"github.com/twicejobs/twice/twicestore"
)

func TestJobsWhy(t *testing.T) {
	t.Parallel()
	testJobsWhy(t, newSetup(t))
}

func TestPostgresJobsWhy(t *testing.T) {
	t.Parallel()
	testJobsWhy(t, newPostgresSetup(t))
}

// testJobsWhy (issue 25): over a team's database with a job waiting for
// each reason, 'jobs ls' shows each one's reason in its WHY column and
// --json as "waiting_because", and 'jobs show' as its "waits because"
// line — through the team's binary (twicecli.Main(reg)) and the stock one,
// which knows the kinds from the catalog only.
func testJobsWhy(t *testing.T, s *setup) {
	db := whytest.Start(t, openTestStore(t, s.db))
	team := Options{Registry: db.Registry}
	stock := Options{Demo: DemoCommand}
	run := func(opts Options, args ...string) string {
		t.Helper()
		r := runWith(t, t.Context(), opts, append(args, "--db", s.db)...)
		if r.code != ExitOK {
			t.Fatalf("twice %s: exit %d\n%s%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
		}
		return r.stdout
	}
	// The stock binary knows a kind's limits from the catalog: its
	// 'limits ls' lists them, and its throttled job reads throttled.
	var stockLimits []limitJSON
	if err := json.Unmarshal([]byte(run(stock, "limits", "ls", "--json")), &stockLimits); err != nil {
		t.Fatal(err)
	}
	if len(stockLimits) == 0 {
		t.Fatal("the stock binary's limits ls lists no limit: the catalog does not carry them")
	}
	for name, opts := range map[string]Options{"team": team, "stock": stock} {
		want := func(j whytest.Job) twice.WaitCode { return j.Code }
		var jobs []jobJSON
		if err := json.Unmarshal([]byte(run(opts, "jobs", "--json")), &jobs); err != nil {
			t.Fatal(err)
		}
		byID := map[int64]jobJSON{}
		for _, j := range jobs {
			byID[j.ID] = j
			if j.State == "running" && j.WaitingBecause != nil {
				t.Errorf("%s: running job %d has a reason: %+v", name, j.ID, j.WaitingBecause)
			}
		}
		table := run(opts, "jobs")
		if !strings.Contains(table, "\tWHY\t") && !strings.Contains(table, "  WHY  ") {
			t.Errorf("%s: jobs ls has no WHY column:\n%s", name, table)
		}
		for _, j := range db.Jobs {
			r := byID[j.ID].WaitingBecause
			if r == nil || r.Code != want(j) {
				t.Errorf("%s: %s job %d: waiting_because %+v, want code %s", name, j.Name, j.ID, r, want(j))
				continue
			}
			line := tableLine(t, table, strconv.FormatInt(j.ID, 10))
			if !strings.Contains(line, " "+string(r.Code)+": ") {
				t.Errorf("%s: jobs ls line of the %s job lacks its reason %q:\n%s", name, j.Name, r.Code, line)
			}
			show := run(opts, "jobs", "show", strconv.FormatInt(j.ID, 10))
			if !regexp.MustCompile(`\n  waits because +` + regexp.QuoteMeta(terminalText(r.Text)) + `\n`).MatchString(show) {
				t.Errorf("%s: jobs show %d lacks \"waits because %s\":\n%s", name, j.ID, r.Text, show)
			}
			var shown jobJSON
			if err := json.Unmarshal([]byte(run(opts, "jobs", "show", strconv.FormatInt(j.ID, 10), "--json")), &shown); err != nil {
				t.Fatal(err)
			}
			if shown.WaitingBecause == nil || shown.WaitingBecause.Text != r.Text {
				t.Errorf("%s: jobs show --json %d: waiting_because %+v, want %q", name, j.ID, shown.WaitingBecause, r.Text)
			}
		}
		held := byID[db.Job(t, "held").ID].WaitingBecause
		if held == nil || held.Source != twice.WaitSourceStore || held.By != whytest.SwitchBy || held.Reason != whytest.SwitchReason {
			t.Errorf("%s: held job's reason %+v lacks the switch's source, who and why", name, held)
		}
		if r := byID[db.Job(t, "retrying").ID].WaitingBecause; r == nil || !strings.HasPrefix(r.Text, "scheduled: retry 1 of 2 at ") {
			t.Errorf("%s: retrying job's reason %+v", name, r)
		}
	}
	// The JSON keys are snake_case, as every --json prints.
	raw := run(team, "jobs", "show", strconv.FormatInt(db.Job(t, "throttled").ID, 10), "--json")
	for _, key := range []string{`"waiting_because"`, `"code": "throttled"`, `"limit"`, `"running": 1`} {
		if !strings.Contains(raw, key) {
			t.Errorf("jobs show --json lacks %s:\n%s", key, raw)
		}
	}
}

// openTestStore opens the store at db (a SQLite path, a PostgreSQL or a
// MySQL URL) for a test's worker, closed when the test ends.
func openTestStore(t *testing.T, db string) twicestore.Store {
	t.Helper()
	var (
		store twicestore.Store
		err   error
	)
	switch {
	case isPostgresURL(db):
		store, err = twicepg.Open(t.Context(), db)
	case isMySQLURL(db):
		store, err = twicemysql.Open(t.Context(), db)
	default:
		store, err = twicesqlite.Open(t.Context(), db)
	}
	if err != nil {
		t.Fatal(err)
	}
	// Registered first, so it runs after the worker has stopped.
	t.Cleanup(func() { _ = store.Close() })
	return store
}
