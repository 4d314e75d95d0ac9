package twicesqlite

import (
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// TestMigration009KeepsJobsAndIDs: migration 009 rebuilds twice_jobs (to
// widen its state check for cancelled). The jobs come through unchanged,
// and ids already handed out are never handed out again, even those of
// jobs retention deleted, since ids are keyset cursors.
func TestMigration009KeepsJobsAndIDs(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "v8.db")
	db, err := sql.Open("sqlite", DSN(path))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = db.Close() }()
	// A database as a twice at migration 008 left it.
	if _, err := db.ExecContext(ctx, createMigrationsTable); err != nil {
		t.Fatal(err)
	}
	for _, m := range embedded[:8] {
		if _, err := db.ExecContext(ctx, m.SQL); err != nil {
			t.Fatalf("apply %s: %v", m.Name, err)
		}
		if _, err := db.ExecContext(ctx, `INSERT INTO twice_migrations (version, name, applied_at) VALUES (?, ?, 0)`,
			m.Version, m.Name); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		if _, err := db.ExecContext(ctx, `INSERT INTO twice_jobs (kind, queue, args, max_attempts, run_at, created_at, errors, metadata)
			VALUES ('k.v1', 'default', x'7b7d', 3, ?, ?, '[{"attempt":1,"at":"2030-01-01T00:00:00Z","error":"boom"}]', '{"a":"b"}')`,
			i, i); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.ExecContext(ctx, `DELETE FROM twice_jobs WHERE id = 3`); err != nil { // the newest, gone by retention
		t.Fatal(err)
	}

	s, err := New(ctx, db)
	if err != nil {
		t.Fatalf("migrate from 008: %v", err)
	}
	if applied, latest, err := s.SchemaVersion(ctx); err != nil || applied != latest {
		t.Fatalf("SchemaVersion = %d, %d, %v", applied, latest, err)
	}
	old, err := s.JobGet(ctx, &twicestore.JobGetParams{ID: 2})
	if err != nil {
		t.Fatal(err)
	}
	if old.Kind != "k.v1" || string(old.Args) != "{}" || len(old.Errors) != 1 || old.Metadata["a"] != "b" || old.Cancel != nil {
		t.Fatalf("job after the rebuild: %+v", old)
	}
	res, err := s.JobInsertMany(ctx, &twicestore.JobInsertManyParams{Jobs: []*twicestore.JobInsertParams{
		{Kind: "k.v1", Queue: "default", MaxAttempts: 1, CreatedAt: time.Now()}}})
	if err != nil {
		t.Fatal(err)
	}
	if id := res.Jobs[0].Job.ID; id != 4 {
		t.Fatalf("first job after the rebuild got id %d, want 4 (3 was used before)", id)
	}
	// The wider check takes cancelled.
	c, err := s.JobCancel(ctx, &twicestore.JobCancelParams{Filter: twicestore.JobFilter{IDs: []int64{4}}})
	if err != nil || len(c.Results) != 1 || c.Results[0].State != twicetype.JobStateCancelled {
		t.Fatalf("cancel after the rebuild: %+v, %v", c, err)
	}
	// The rebuilt indexes are the ones fetch and retention pin.
	for _, idx := range []string{"twice_jobs_fetch", "twice_jobs_running_kind", "twice_jobs_unique", "twice_jobs_state_id", "twice_jobs_kind_id"} {
		var n int
		if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND name = ? AND tbl_name = 'twice_jobs'`, idx).Scan(&n); err != nil || n != 1 {
			t.Errorf("index %s: %d, %v", idx, n, err)
		}
	}
	// 016 dropped the lease_until index: no write pays for it any more.
	var n int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM sqlite_master WHERE name = 'twice_jobs_rescue'`).Scan(&n); err != nil || n != 0 {
		t.Errorf("twice_jobs_rescue after the migrations: %d, %v", n, err)
	}
}
