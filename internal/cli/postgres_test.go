package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// newPostgresSetup is a setup whose --db is a schema of its own on the
// TWICE_TEST_POSTGRES server.
func newPostgresSetup(t *testing.T) *setup {
	t.Helper()
	base := os.Getenv("TWICE_TEST_POSTGRES")
	if base == "" {
		t.Skip("TWICE_TEST_POSTGRES is not set; .ci/run sets it to the local server")
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, base)
	if err != nil {
		t.Fatalf("TWICE_TEST_POSTGRES: %v", err)
	}
	defer pool.Close()
	schema := fmt.Sprintf("twice_cli_%d_%d", os.Getpid(), time.Now().UnixNano()%1_000_000_000)
	if _, err := pool.Exec(ctx, `CREATE SCHEMA `+schema); err != nil {
		t.Fatalf("PostgreSQL at TWICE_TEST_POSTGRES: %v", err)
	}
	t.Cleanup(func() {
		p, err := pgxpool.New(context.Background(), base)
		if err == nil {
			_, _ = p.Exec(context.Background(), `DROP SCHEMA `+schema+` CASCADE`)
			p.Close()
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	s := &setup{t: t, db: u.String()}
	s.ok("migrate")
	return s
}

func TestPostgresURLWorksForTheAdminCommands(t *testing.T) {
	t.Parallel()
	s := newPostgresSetup(t)
	r := s.ok("enqueue", "ads.image-watermark.v1", `{"image_id": 7}`)
	if !strings.Contains(r.stdout, "enqueued job") {
		t.Fatalf("enqueue: %q", r.stdout)
	}
	r = s.ok("jobs", "--json")
	var jobs []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &jobs); err != nil || len(jobs) != 1 {
		t.Fatalf("jobs --json = %q (%v), want one job", r.stdout, err)
	}
	s.ok("jobs", "show", fmt.Sprint(jobs[0]["id"]))
	s.ok("dlq", "ls")
	r = s.ok("orphans")
	if !strings.Contains(r.stdout, "ads.image-watermark.v1") {
		t.Errorf("orphans does not list the waiting kind no worker handles: %q", r.stdout)
	}
	if r := s.run("serve"); r.code != ExitUsage || !strings.Contains(r.stderr, "SQLite-only") {
		t.Errorf("serve on PostgreSQL: exit %d, stderr %q; want a usage error explaining why", r.code, r.stderr)
	}
	if r := s.run("enqueue", "ads.image-watermark.v2", `{}`); r.code != ExitUsage {
		t.Errorf("unknown kind on PostgreSQL: exit %d, want %d", r.code, ExitUsage)
	}
}
