package twicesqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/twicejobs/twice/internal/testkit/sqlitetemplate"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicestore/storetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// migratedCopy returns the path of a new file under t.TempDir holding a
// freshly migrated database: a copy of one Open migrated once for the
// whole test binary (see sqlitetemplate).
func migratedCopy(t *testing.T) string {
	t.Helper()
	return sqlitetemplate.Copy(t, "twicesqlite", func(path string) error {
		s, err := Open(context.Background(), path)
		if err != nil {
			return err
		}
		return s.Close()
	})
}

// openTemp opens a store on a freshly migrated file under t.TempDir and
// closes it when the test ends.
func openTemp(t *testing.T) *Store {
	t.Helper()
	s, err := Open(t.Context(), migratedCopy(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) twicestore.Store { return openTemp(t) })
}

// TestConformanceNew runs the suite on a store made by New over a database
// the application opened itself.
func TestConformanceNew(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) twicestore.Store {
		path := sqlitetemplate.Copy(t, "twicesqlite-new", func(path string) error { // migrated by New
			db, err := sql.Open("sqlite", DSN(path))
			if err != nil {
				return err
			}
			if _, err := New(context.Background(), db); err != nil {
				db.Close()
				return err
			}
			return db.Close()
		})
		db, err := sql.Open("sqlite", DSN(path))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		s, err := New(t.Context(), db)
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// TestIsUniqueViolation proves both extended codes SQLite reports for a
// duplicate are recognised: SQLITE_CONSTRAINT_PRIMARYKEY from a primary key
// and SQLITE_CONSTRAINT_UNIQUE from a unique index.
func TestIsUniqueViolation(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db, err := sql.Open("sqlite", DSN(filepath.Join(t.TempDir(), "codes.db")))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `
		CREATE TABLE by_pk (a TEXT NOT NULL, b TEXT NOT NULL, PRIMARY KEY (a, b));
		CREATE TABLE by_index (a TEXT NOT NULL, b TEXT NOT NULL);
		CREATE UNIQUE INDEX by_index_ab ON by_index (a, b);
		CREATE TABLE by_check (a TEXT NOT NULL CHECK (a <> 'bad'));`); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, insert string
		code         int
	}{
		{"primary key", `INSERT INTO by_pk VALUES ('x', 'y')`, 1555},
		{"unique index", `INSERT INTO by_index VALUES ('x', 'y')`, 2067},
	} {
		if _, err := db.ExecContext(ctx, tc.insert); err != nil {
			t.Fatalf("%s: first insert: %v", tc.name, err)
		}
		_, err := db.ExecContext(ctx, tc.insert)
		if err == nil {
			t.Fatalf("%s: duplicate insert succeeded", tc.name)
		}
		if code := sqliteCode(err); code != tc.code {
			t.Errorf("%s: SQLite reported code %d, want %d (the test's premise)", tc.name, code, tc.code)
		}
		if !isUniqueViolation(err) {
			t.Errorf("%s: isUniqueViolation(%v) = false, want true", tc.name, err)
		}
		if !isUniqueViolation(errors.Join(errors.New("context"), err)) {
			t.Errorf("%s: a wrapped violation is not recognised", tc.name)
		}
	}
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"nil", nil},
		{"plain error", errors.New("UNIQUE constraint failed")},
		{"no rows", sql.ErrNoRows},
		{"check constraint", execErr(ctx, db, `INSERT INTO by_check VALUES ('bad')`)},
		{"not null", execErr(ctx, db, `INSERT INTO by_pk VALUES (NULL, 'y')`)},
		{"syntax", execErr(ctx, db, `INSERT INTO nowhere VALUES (1)`)},
	} {
		if isUniqueViolation(tc.err) {
			t.Errorf("%s: isUniqueViolation(%v) = true, want false", tc.name, tc.err)
		}
	}
}

func execErr(ctx context.Context, db *sql.DB, query string) error {
	_, err := db.ExecContext(ctx, query)
	return err
}

func sqliteCode(err error) int {
	var c interface{ Code() int }
	if errors.As(err, &c) {
		return c.Code()
	}
	return 0
}

// TestMarkerClaimPropagatesOtherErrors checks a claim that fails for any
// reason but a duplicate is an error, not "already processed".
func TestMarkerClaimPropagatesOtherErrors(t *testing.T) {
	t.Parallel()
	s := openTemp(t)
	if _, err := s.db.ExecContext(t.Context(), `CREATE TRIGGER twice_markers_fail BEFORE INSERT ON twice_markers
		WHEN NEW.handler = 'h.fail' BEGIN SELECT RAISE(ABORT, 'injected failure'); END`); err != nil {
		t.Fatal(err)
	}
	res, err := s.MarkerClaim(t.Context(), &twicestore.MarkerParams{Handler: "h.fail", Key: "k"})
	if err == nil || !strings.Contains(err.Error(), "injected failure") {
		t.Fatalf("MarkerClaim = %+v, %v; want the injected error", res, err)
	}
}

func TestOpenNotADatabase(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "notes.txt")
	content := []byte("these are my notes, not a database\n")
	if err := os.WriteFile(path, content, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := Open(t.Context(), path)
	if err == nil {
		s.Close()
		t.Fatal("Open of a text file succeeded")
	}
	want := `open twice database "` + path + `": file is not a SQLite database`
	if err.Error() != want {
		t.Errorf("error = %q,\nwant %q", err, want)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(content) {
		t.Errorf("the file was changed: %q", got)
	}
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Errorf("Open left files behind next to it: %v", entries)
	}
}

func TestOpenUnopenablePath(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, path, want string }{
		{"missing directory", filepath.Join(dir, "missing", "twice.db"), "does not exist"},
		{"parent is a file", filepath.Join(file, "twice.db"), "not a directory"},
		{"path is a directory", dir, "is a directory"},
		{"empty path", "", "path is empty"},
	} {
		s, err := Open(t.Context(), tc.path)
		if err == nil {
			s.Close()
			t.Errorf("%s: Open(%q) succeeded", tc.name, tc.path)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, `"`+tc.path+`"`) || !strings.Contains(msg, tc.want) || strings.Contains(msg, "\n") {
			t.Errorf("%s: error = %q; want one line naming %q and saying %q", tc.name, msg, tc.path, tc.want)
		}
	}
}

func TestOpenSchemaTooNew(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "twice.db")
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	j := &twicestore.JobInsertParams{Kind: "test.keep.v1", Queue: "default", Args: []byte(`{}`), MaxAttempts: 1}
	ins, err := s.JobInsertMany(ctx, &twicestore.JobInsertManyParams{Jobs: []*twicestore.JobInsertParams{j}})
	if err != nil {
		t.Fatal(err)
	}
	future := latestVersion() + 5
	if _, err := s.db.ExecContext(ctx, `INSERT INTO twice_migrations (version, name, applied_at) VALUES (?, 'from_the_future', 0)`, future); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}

	s, err = Open(ctx, path)
	if err == nil {
		s.Close()
		t.Fatal("Open of a database from a newer twice succeeded")
	}
	if !errors.Is(err, twicestore.ErrSchemaTooNew) {
		t.Fatalf("error = %v, want ErrSchemaTooNew", err)
	}
	for _, want := range []string{path, "upgrade twice", "version " + strconv.Itoa(future), strconv.Itoa(latestVersion())} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	after, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(before) != string(after) {
		t.Error("refusing the database changed its file")
	}

	// The job is still there, as it was, for the newer binary.
	db, err := sql.Open("sqlite", DSN(path))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	raw := &executor{db: db}
	got, err := raw.JobGet(ctx, &twicestore.JobGetParams{ID: ins.Jobs[0].Job.ID})
	if err != nil {
		t.Fatal(err)
	}
	if got.State != ins.Jobs[0].Job.State || got.Kind != j.Kind || got.Epoch != 0 {
		t.Errorf("job changed: %+v", got)
	}

	// New refuses it the same way.
	if _, err := New(ctx, db); !errors.Is(err, twicestore.ErrSchemaTooNew) {
		t.Errorf("New: error = %v, want ErrSchemaTooNew", err)
	}
}

func TestNewRejectsOtherDrivers(t *testing.T) {
	t.Parallel()
	if _, err := New(t.Context(), nil); err == nil {
		t.Error("New(nil) succeeded")
	}
	db, err := sql.Open("twicesqlite-fake", "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := New(t.Context(), db); err == nil || !strings.Contains(err.Error(), "modernc.org/sqlite") {
		t.Errorf("New with another driver: error = %v, want one naming modernc.org/sqlite", err)
	}
}

func init() { sql.Register("twicesqlite-fake", fakeDriver{}) }

type fakeDriver struct{}

func (fakeDriver) Open(string) (driver.Conn, error) { return nil, errors.New("fake driver") }

func TestDSNEscapesPath(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "odd ?name#%.db")
	s, err := Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the database is not at the path given: %v", err)
	}
}

// TestOpenRelativePath opens a path relative to the working directory, the
// CLI's default ./twice.db.
func TestOpenRelativePath(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	s, err := Open(t.Context(), "twice.db")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := os.Stat(filepath.Join(dir, "twice.db")); err != nil {
		t.Fatalf("the database is not in the working directory: %v", err)
	}
}

func TestOpenSetsPragmas(t *testing.T) {
	t.Parallel()
	s := openTemp(t)
	for pragma, want := range map[string]string{"journal_mode": "wal", "foreign_keys": "1", "busy_timeout": "10000"} {
		var got string
		if err := s.db.QueryRowContext(t.Context(), "PRAGMA "+pragma).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("PRAGMA %s = %s, want %s", pragma, got, want)
		}
	}
}

func TestMigrationsEmbedded(t *testing.T) {
	t.Parallel()
	if len(embedded) == 0 || embedded[0].Version != 1 || !strings.Contains(embedded[0].SQL, "twice_jobs") {
		t.Fatalf("embedded migrations = %+v", embedded)
	}
}
