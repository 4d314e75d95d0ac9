package cli

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/twicejobs/twice/internal/testkit/waitfor"
)

// dbSnapshot is what the stock binary must not change in a database: its
// tables and its stored switches.
func dbSnapshot(t *testing.T, path string) string {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = db.Close() }()
	var b strings.Builder
	for _, q := range []string{
		`SELECT type || ' ' || name FROM sqlite_master ORDER BY type, name`,
		`SELECT kind || ' ' || enabled || ' ' || reason || ' ' || set_by FROM twice_toggles ORDER BY kind`,
	} {
		rows, err := db.QueryContext(t.Context(), q)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			fmt.Fprintln(&b, s)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if err := rows.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

// TestStockServeRefuses: the stock binary registers no kinds, so its serve
// refuses, saying how to build a binary that works kinds, and changes
// nothing: no demo table, no switch.
func TestStockServeRefuses(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	before := dbSnapshot(t, s.db)
	for _, args := range [][]string{{"serve"}, {"serve", "--dashboard", "127.0.0.1:0"}} {
		r := runStock(t, t.Context(), append(args, "--db", s.db)...)
		wantError(t, r, ExitUsage, "registers no job kinds", "twicecli.Main", "twice dashboard")
	}
	if after := dbSnapshot(t, s.db); after != before {
		t.Errorf("stock serve changed the database:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

var dashboardURL = regexp.MustCompile(`dashboard: (http://\S+/)`)

// TestStockDashboard: 'twice dashboard' serves the dashboard on a database
// and, until an operator acts, writes nothing to it.
func TestStockDashboard(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	s.enqueue(emailKind, `{"user_id": 1}`)
	before := dbSnapshot(t, s.db)

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stdout := &syncBuffer{wait: "dashboard: http://", seen: make(chan struct{})}
	var stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- Main(ctx, Options{Demo: DemoCommand}, []string{"dashboard", "--db", s.db, "--addr", "127.0.0.1:0", "--allowed-host", "twice.internal"}, stdout, &stderr)
	}()
	waitfor.RecvBefore(t, stdout.seen, done, "the dashboard to start", func() string { return stdout.String() + stderr.String() })
	base := dashboardURL.FindStringSubmatch(stdout.String())[1]
	for _, page := range []string{"", "jobs", "switches"} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+page, nil)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Errorf("GET /%s: %s", page, res.Status)
		}
	}
	// Without authentication it answers loopback names and --allowed-host
	// only (DNS rebinding).
	for host, ok := range map[string]bool{"twice.internal": true, "attacker.example": false} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base, nil)
		req.Host = host
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = res.Body.Close()
		if (res.StatusCode == http.StatusOK) != ok {
			t.Errorf("GET / with Host %s: %s", host, res.Status)
		}
	}
	cancel()
	if code := waitfor.Recv(t, done, "the dashboard to stop"); code != ExitOK {
		t.Errorf("dashboard exited %d after SIGINT, want 0\n%s", code, stderr.String())
	}
	if after := dbSnapshot(t, s.db); after != before {
		t.Errorf("twice dashboard changed the database:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// TestDashboardBadInput: a dashboard needs an address, and a database
// that exists.
func TestDashboardBadInput(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	wantError(t, runStock(t, t.Context(), "dashboard", "--db", s.db, "--addr", ""), ExitUsage, "--addr is empty")
	wantError(t, runStock(t, t.Context(), "dashboard", "--db", s.db+".typo", "--addr", "127.0.0.1:0"), ExitFailure, "does not exist")
	wantError(t, runStock(t, t.Context(), "dashboard", "--db", s.db, "--addr", "0.0.0.0:0"), ExitUsage, "--addr")
}
