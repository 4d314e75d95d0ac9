package twicepg

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"go.uber.org/goleak"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicestore/storetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		dropEmptied()
		os.Exit(code)
	}))
}

// emptied holds migrated schemas that a conformance check is done with,
// emptied of every row, for the next check to reuse. Migrating a new
// schema costs the server about 220 ms, dropping one more; emptying one
// costs about 50 ms, and the conformance suite makes one per check, twice
// over (TestConformanceNew, TestConformanceStdlib).
var emptied struct {
	sync.Mutex
	schemas []string
}

// migratedSchema returns the URL of a migrated schema with no rows in it
// that no other test uses until this one ends: an emptied one, or else a
// new one. When the test ends it is emptied for the next, or dropped if
// it cannot be.
//
// An emptied schema is what migrating a new one makes, row for row:
// TRUNCATE removes every row of every table but the migration record and
// restarts the identity sequences. The tests that use it open their own
// pools, so no session state outlives the test.
func migratedSchema(t *testing.T) string {
	t.Helper()
	base := testConnString(t)
	emptied.Lock()
	var schema string
	if n := len(emptied.schemas); n > 0 {
		schema, emptied.schemas = emptied.schemas[n-1], emptied.schemas[:n-1]
	}
	emptied.Unlock()
	if schema == "" {
		schema = createSchema(t, base)
		connString := withParams(t, base, map[string]string{"search_path": schema})
		s, err := Open(t.Context(), connString)
		if err != nil {
			_ = dropSchema(base, schema) // the Open error is the one to report
			t.Fatal(err)
		}
		s.Close()
	}
	t.Cleanup(func() {
		if err := emptySchema(base, schema); err != nil {
			t.Errorf("empty test schema %s for reuse: %v", schema, err)
			_ = dropSchema(base, schema) // the error above is the one to report
			return
		}
		emptied.Lock()
		emptied.schemas = append(emptied.schemas, schema)
		emptied.Unlock()
	})
	return withParams(t, base, map[string]string{"search_path": schema})
}

// emptySchema removes every row of schema's tables but the migration
// record's, and restarts their identity sequences.
func emptySchema(base, schema string) error {
	return onServer(base, func(ctx context.Context, conn *pgx.Conn) error {
		var tables string
		if err := conn.QueryRow(ctx, `SELECT string_agg(format('%I.%I', schemaname, tablename), ', ')
			FROM pg_tables WHERE schemaname = $1 AND tablename <> 'twice_migrations'`, schema).Scan(&tables); err != nil {
			return err
		}
		_, err := conn.Exec(ctx, "TRUNCATE "+tables+" RESTART IDENTITY")
		return err
	})
}

// dropSchema drops schema and everything in it.
func dropSchema(base, schema string) error {
	return onServer(base, func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		return err
	})
}

// onServer runs fn on a connection of its own to base, within 30 s. It
// serves cleanups: the test's context is cancelled before they run.
func onServer(base string, fn func(ctx context.Context, conn *pgx.Conn) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return fn(ctx, conn)
}

// dropEmptied drops the emptied schemas when the tests are over.
func dropEmptied() {
	base := os.Getenv("TWICE_TEST_POSTGRES")
	emptied.Lock()
	defer emptied.Unlock()
	for _, schema := range emptied.schemas {
		_ = dropSchema(base, schema) // the tests are over: no test to tell
	}
	emptied.schemas = nil
}

func randomHex() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// testConnString returns the server the tests use, from TWICE_TEST_POSTGRES,
// and skips the test when it is not set.
func testConnString(t *testing.T) string {
	t.Helper()
	s := os.Getenv("TWICE_TEST_POSTGRES")
	if s == "" {
		t.Skip("TWICE_TEST_POSTGRES is not set; set it to a PostgreSQL URL " +
			"(e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable) to run the PostgreSQL tests")
	}
	return s
}

// withParams returns connString, a URL or a keyword/value string, with
// params set.
func withParams(t *testing.T, connString string, params map[string]string) string {
	t.Helper()
	if strings.HasPrefix(connString, "postgres://") || strings.HasPrefix(connString, "postgresql://") {
		u, err := url.Parse(connString)
		if err != nil {
			t.Fatalf("TWICE_TEST_POSTGRES: %v", err)
		}
		q := u.Query()
		for k, v := range params {
			q.Set(k, v)
		}
		u.RawQuery = q.Encode()
		return u.String()
	}
	for k, v := range params {
		connString += " " + k + "=" + v
	}
	return connString
}

// connect opens one connection to the test server, and fails the test
// (never skips it) when the server cannot be reached.
func connect(t *testing.T, ctx context.Context, connString string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, connString)
	if err != nil {
		t.Fatalf("connect to TWICE_TEST_POSTGRES: %v", err)
	}
	return conn
}

// newSchema creates a schema of the test's own, drops it when the test ends,
// and returns a connection string whose search_path is that schema.
func newSchema(t *testing.T) (connString, schema string) {
	t.Helper()
	base := testConnString(t)
	schema = createSchema(t, base)
	t.Cleanup(func() {
		if err := dropSchema(base, schema); err != nil {
			t.Errorf("drop test schema: %v", err)
		}
	})
	return withParams(t, base, map[string]string{"search_path": schema}), schema
}

// createSchema creates a schema of a new name on base and returns the name.
func createSchema(t *testing.T, base string) string {
	t.Helper()
	schema := "twice_test_" + randomHex()
	conn := connect(t, t.Context(), base)
	defer conn.Close(context.Background())
	if _, err := conn.Exec(t.Context(), "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	return schema
}

// openStore opens a store in a new schema and closes it when the test ends.
func openStore(t *testing.T) (*Store, string) {
	t.Helper()
	connString, _ := newSchema(t)
	return openAt(t, connString), connString
}

// poolOf returns connString with a pool size for a test: tests run in
// parallel, and the server allows 100 connections in all.
func poolOf(t *testing.T, connString string) string {
	return withParams(t, connString, map[string]string{"pool_max_conns": "4"})
}

// openAt opens a store on connString and closes it when the test ends.
func openAt(t *testing.T, connString string) *Store {
	t.Helper()
	s, err := Open(t.Context(), poolOf(t, connString))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// The conformance suite runs twice on PostgreSQL, between them over every
// path a query takes: through pgx and through database/sql; fetches
// floored and from the front of the queue; a store made by New and by
// Open. A third pass, through pgx with floors as in production, added
// nothing the two do not run: on the suite's small tables a fetch scans
// in a millisecond, so production's floors never engage and every fetch
// takes the unfloored path that TestConformanceStdlib runs.

// TestConformanceNew runs the suite on a store made by New over a pool the
// application made itself, and with fetch floors in use whenever the last
// fetch filled its limit (however fast it was), so the floored fetch meets
// every case the suite has (see fetchfloor.go); the first fetch of a case,
// and one after a fetch that came back short, scan from the front.
func TestConformanceNew(t *testing.T) {
	t.Parallel()
	testConnString(t) // one skip for the suite, not one per check
	var (
		mu     sync.Mutex
		floors []*fetchFloors
	)
	t.Cleanup(func() { // after every check, parallel ones included
		var n int64
		for _, f := range floors {
			n += f.floored.Load()
		}
		if n == 0 {
			t.Error("no check of the suite ran a floored fetch")
		}
		t.Logf("%d floored fetches", n)
	})
	storetest.Run(t, func(t *testing.T) twicestore.Store {
		pool, err := pgxpool.New(t.Context(), poolOf(t, migratedSchema(t)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		s, err := New(t.Context(), pool)
		if err != nil {
			t.Fatal(err)
		}
		s.floors.slowScan = 0
		mu.Lock()
		floors = append(floors, s.floors)
		mu.Unlock()
		return s
	})
}

// TestConformanceStdlib runs the suite with every Executor query going
// through database/sql and pgx's stdlib adapter, the path ExecutorFromTx
// takes for a *sql.Tx.
func TestConformanceStdlib(t *testing.T) {
	t.Parallel()
	testConnString(t) // one skip for the suite, not one per check
	storetest.Run(t, func(t *testing.T) twicestore.Store {
		s := openAt(t, migratedSchema(t))
		db := stdlib.OpenDBFromPool(s.pool)
		t.Cleanup(func() { db.Close() }) // before the store's Close: cleanups run last first
		viaSQL := *s
		viaSQL.executor = &executor{q: sqlQuerier{db}, notify: s.notify}
		return &viaSQL
	})
}

// TestIsUniqueViolation proves a duplicate is recognised whatever enforces
// uniqueness: a primary key, a unique index, a partial unique index and a
// UNIQUE constraint all report SQLSTATE 23505, through pgx and through
// database/sql alike; other failures are not duplicates.
func TestIsUniqueViolation(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	connString, _ := newSchema(t)
	conn := connect(t, ctx, connString)
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `
		CREATE TABLE by_pk (a text NOT NULL, b text NOT NULL, PRIMARY KEY (a, b));
		CREATE TABLE by_index (a text NOT NULL, b text NOT NULL);
		CREATE UNIQUE INDEX by_index_ab ON by_index (a, b);
		CREATE TABLE by_partial (a text NOT NULL, live boolean NOT NULL);
		CREATE UNIQUE INDEX by_partial_a ON by_partial (a) WHERE live;
		CREATE TABLE by_constraint (a text NOT NULL UNIQUE);
		CREATE TABLE by_check (a text NOT NULL CHECK (a <> 'bad'));`); err != nil {
		t.Fatal(err)
	}
	db := stdlib.OpenDB(*conn.Config())
	defer db.Close()
	for _, tc := range []struct{ name, insert string }{
		{"primary key", `INSERT INTO by_pk VALUES ('x', 'y')`},
		{"unique index", `INSERT INTO by_index VALUES ('x', 'y')`},
		{"partial unique index", `INSERT INTO by_partial VALUES ('x', true)`},
		{"unique constraint", `INSERT INTO by_constraint VALUES ('x')`},
	} {
		if _, err := conn.Exec(ctx, tc.insert); err != nil {
			t.Fatalf("%s: first insert: %v", tc.name, err)
		}
		_, err := conn.Exec(ctx, tc.insert)
		if err == nil {
			t.Fatalf("%s: duplicate insert succeeded", tc.name)
		}
		if !isUniqueViolation(err) {
			t.Errorf("%s: isUniqueViolation(%v) = false, want true", tc.name, err)
		}
		if !isUniqueViolation(errors.Join(errors.New("context"), err)) {
			t.Errorf("%s: a wrapped violation is not recognised", tc.name)
		}
		if _, err := db.ExecContext(ctx, tc.insert); !isUniqueViolation(err) {
			t.Errorf("%s: through database/sql, isUniqueViolation(%v) = false, want true", tc.name, err)
		}
	}
	execErr := func(query string) error {
		_, err := conn.Exec(ctx, query)
		return err
	}
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"nil", nil},
		{"plain error", errors.New("duplicate key value violates unique constraint")},
		{"no rows", pgx.ErrNoRows},
		{"check constraint", execErr(`INSERT INTO by_check VALUES ('bad')`)},
		{"not null", execErr(`INSERT INTO by_pk VALUES (NULL, 'y')`)},
		{"syntax", execErr(`INSERT INTO nowhere VALUES (1)`)},
	} {
		if isUniqueViolation(tc.err) {
			t.Errorf("%s: isUniqueViolation(%v) = true, want false", tc.name, tc.err)
		}
	}
}

func TestOpenSchemaTooNew(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	connString, _ := newSchema(t)
	s := openAt(t, connString)
	j := &twicestore.JobInsertParams{Kind: "test.keep.v1", Queue: "default", Args: []byte(`{}`), MaxAttempts: 1}
	ins, err := s.JobInsertMany(ctx, &twicestore.JobInsertManyParams{Jobs: []*twicestore.JobInsertParams{j}})
	if err != nil {
		t.Fatal(err)
	}
	future := latestVersion() + 5
	if _, err := s.pool.Exec(ctx, `INSERT INTO twice_migrations (version, name, applied_at) VALUES ($1, 'from_the_future', now())`, future); err != nil {
		t.Fatal(err)
	}
	s.Close()

	conn := connect(t, ctx, connString)
	defer conn.Close(context.Background())
	snapshot := func() string {
		t.Helper()
		var state string
		if err := conn.QueryRow(ctx, `SELECT (SELECT string_agg(version || ':' || name, ',' ORDER BY version) FROM twice_migrations)
			|| ' ' || (SELECT string_agg(id || ':' || state || ':' || epoch || ':' || attempt, ',' ORDER BY id) FROM twice_jobs)`).Scan(&state); err != nil {
			t.Fatal(err)
		}
		return state
	}
	before := snapshot()

	again, err := Open(ctx, connString)
	if err == nil {
		again.Close()
		t.Fatal("Open of a database from a newer twice succeeded")
	}
	if !errors.Is(err, twicestore.ErrSchemaTooNew) {
		t.Fatalf("error = %v, want ErrSchemaTooNew", err)
	}
	for _, want := range []string{"upgrade twice", "version " + strconv.Itoa(future), strconv.Itoa(latestVersion())} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if after := snapshot(); after != before {
		t.Errorf("refusing the database changed it:\nbefore %s\nafter  %s", before, after)
	}

	// The job is still there, as it was, for the newer binary.
	raw := &executor{q: pgxQuerier{conn}}
	got, err := raw.JobGet(ctx, &twicestore.JobGetParams{ID: ins.Jobs[0].Job.ID})
	if err != nil {
		t.Fatal(err)
	}
	if got.State != ins.Jobs[0].Job.State || got.Kind != j.Kind || got.Epoch != 0 {
		t.Errorf("job changed: %+v", got)
	}

	// New refuses it the same way, and so does Migrate on a store that was
	// opened before the newer binary migrated.
	pool, err := pgxpool.New(ctx, connString)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := New(ctx, pool); !errors.Is(err, twicestore.ErrSchemaTooNew) {
		t.Errorf("New: error = %v, want ErrSchemaTooNew", err)
	}
	old := &Store{executor: &executor{q: pgxQuerier{pool}}, pool: pool}
	if err := old.Migrate(ctx); !errors.Is(err, twicestore.ErrSchemaTooNew) {
		t.Errorf("Migrate: error = %v, want ErrSchemaTooNew", err)
	}
	if after := snapshot(); after != before {
		t.Errorf("refusing the database changed it:\nbefore %s\nafter  %s", before, after)
	}
}

// TestOpenConcurrently starts four nodes on one empty schema at once: the
// advisory lock lets one migrate while the others wait, then find nothing
// to do.
func TestOpenConcurrently(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	connString, _ := newSchema(t)
	connString = withParams(t, connString, map[string]string{"pool_max_conns": "2"})
	var (
		wg     sync.WaitGroup
		stores = make([]*Store, 4)
		errs   = make([]error, 4)
	)
	start := make(chan struct{})
	for i := range stores {
		wg.Go(func() {
			<-start
			stores[i], errs[i] = Open(ctx, connString)
		})
	}
	close(start)
	wg.Wait()
	for i, s := range stores {
		if errs[i] != nil {
			t.Errorf("Open %d: %v", i, errs[i])
			continue
		}
		defer s.Close()
		applied, latest, err := s.SchemaVersion(ctx)
		if err != nil || applied != latest {
			t.Errorf("store %d: SchemaVersion = %d, %d, %v", i, applied, latest, err)
		}
	}
	if t.Failed() {
		return
	}
	var n int
	if err := stores[0].pool.QueryRow(ctx, `SELECT count(*) FROM twice_migrations`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != latestVersion() {
		t.Errorf("twice_migrations has %d rows, want %d: a migration was applied twice", n, latestVersion())
	}
}

// TestOpenMissingSchema: a search_path naming no existing schema is refused
// with a message saying what to do, and nothing is created.
func TestOpenMissingSchema(t *testing.T) {
	t.Parallel()
	base := testConnString(t)
	missing := "twice_missing_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	s, err := Open(t.Context(), withParams(t, base, map[string]string{"search_path": missing}))
	if err == nil {
		s.Close()
		t.Fatal("Open with a search_path naming no schema succeeded")
	}
	if !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), "CREATE SCHEMA") {
		t.Errorf("error = %q; want it to name %q and say to create the schema", err, missing)
	}
}

// TestOpenUnreachable: a server that is not there fails Open quickly and
// plainly.
func TestOpenUnreachable(t *testing.T) {
	t.Parallel()
	testConnString(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	// Port 1 on loopback: nothing listens there.
	s, err := Open(ctx, "postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=5")
	if err == nil {
		s.Close()
		t.Fatal("Open of an unreachable server succeeded")
	}
	if !strings.HasPrefix(err.Error(), "open twice database") {
		t.Errorf("error = %q", err)
	}
}

// TestExecutorFromTx commits jobs with the application's own writes, in a
// pgx.Tx and in a *sql.Tx of pgx's stdlib adapter: a rollback leaves neither,
// a commit makes both visible.
func TestExecutorFromTx(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, connString := openStore(t)
	if _, err := s.pool.Exec(ctx, `CREATE TABLE app_orders (id bigint PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	conn := connect(t, ctx, connString)
	defer conn.Close(context.Background())
	db := stdlib.OpenDB(*conn.Config())
	defer db.Close()

	type appTx struct {
		tx               any
		exec             func(query string, args ...any) error
		commit, rollback func() error
	}
	begins := map[string]func() appTx{
		"pgx.Tx": func() appTx {
			tx, err := conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return appTx{tx,
				func(q string, args ...any) error { _, err := tx.Exec(ctx, q, args...); return err },
				func() error { return tx.Commit(ctx) }, func() error { return tx.Rollback(ctx) }}
		},
		"*sql.Tx": func() appTx {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			return appTx{tx,
				func(q string, args ...any) error { _, err := tx.ExecContext(ctx, q, args...); return err },
				tx.Commit, tx.Rollback}
		},
	}
	order := int64(0)
	for name, begin := range begins {
		for _, commit := range []bool{false, true} {
			order++
			tx := begin()
			ex, err := s.ExecutorFromTx(tx.tx)
			if err != nil {
				t.Fatalf("%s: ExecutorFromTx: %v", name, err)
			}
			if err := tx.exec(`INSERT INTO app_orders (id) VALUES ($1)`, order); err != nil {
				t.Fatal(err)
			}
			res, err := ex.JobInsertMany(ctx, &twicestore.JobInsertManyParams{Jobs: []*twicestore.JobInsertParams{
				{Kind: "test.outbox.v1", Queue: "default", Args: []byte(`{"order":1}`), MaxAttempts: 3},
			}})
			if err != nil {
				t.Fatalf("%s: JobInsertMany in the transaction: %v", name, err)
			}
			id := res.Jobs[0].Job.ID
			if _, err := ex.JobGet(ctx, &twicestore.JobGetParams{ID: id}); err != nil {
				t.Fatalf("%s: the transaction cannot see its own job: %v", name, err)
			}
			if _, err := s.JobGet(ctx, &twicestore.JobGetParams{ID: id}); !errors.Is(err, twicestore.ErrNotFound) {
				t.Fatalf("%s: job visible before commit: %v", name, err)
			}
			end := tx.rollback
			if commit {
				end = tx.commit
			}
			if err := end(); err != nil {
				t.Fatal(err)
			}
			var orders int
			if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM app_orders WHERE id = $1`, order).Scan(&orders); err != nil {
				t.Fatal(err)
			}
			_, err = s.JobGet(ctx, &twicestore.JobGetParams{ID: id})
			switch {
			case commit && (err != nil || orders != 1):
				t.Errorf("%s: after commit: job error %v, %d orders; want the job and the order", name, err, orders)
			case !commit && (!errors.Is(err, twicestore.ErrNotFound) || orders != 0):
				t.Errorf("%s: after rollback: job error %v, %d orders; want neither", name, err, orders)
			}
		}
	}

	twiceTx, err := s.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer twiceTx.Rollback(ctx)
	for _, v := range []any{twiceTx, twiceTx.Unwrap()} {
		if _, err := s.ExecutorFromTx(v); err != nil {
			t.Errorf("ExecutorFromTx(%T): %v", v, err)
		}
	}
	var nilSQLTx *sql.Tx
	for _, v := range []any{s.pool, conn, db, nilSQLTx} {
		if _, err := s.ExecutorFromTx(v); !errors.Is(err, twicestore.ErrWrongTx) {
			t.Errorf("ExecutorFromTx(%T) error = %v, want ErrWrongTx", v, err)
		}
	}
}

func TestMigrationsEmbedded(t *testing.T) {
	t.Parallel()
	if len(embedded) == 0 || embedded[0].Version != 1 || !strings.Contains(embedded[0].SQL, "twice_jobs") {
		t.Fatalf("embedded migrations = %+v", embedded)
	}
}
