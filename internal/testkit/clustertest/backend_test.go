package clustertest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/dbrows"
	"github.com/twicejobs/twice/internal/testkit/mysqltest"
	"github.com/twicejobs/twice/internal/testkit/pgtest"
	"github.com/twicejobs/twice/twicemysql"
	"github.com/twicejobs/twice/twicepg"
	"github.com/twicejobs/twice/twicestore"
)

// envBackend, in a worker's environment, names the backend its store and
// its handlers' effects are on (backend.name).
const envBackend = "TWICE_CLUSTER_BACKEND"

// backend is one kind of database server the cluster tests run on. Only
// what differs between servers is here: how a test gets a database of its
// own, how a store and a plain connection are opened on it, the SQL of
// the completion witness, and how the server is told to cut the workers'
// connections. The tests, their kinds and their checks are the same on
// every backend.
type backend struct {
	name string // the subtest's name and envBackend's value
	// database makes a database of the test's own on the server the
	// environment names (skipping the test when it names none), dropped
	// when the test ends.
	database func(t testing.TB) *testDatabase
	// openStore opens twice's store on url.
	openStore func(ctx context.Context, url string) (twicestore.Store, error)
	// openDB opens a plain connection pool on url, for the handlers'
	// effects and the test's own reads.
	openDB func(ctx context.Context, url string) (database, error)
	// witness is the SQL that records every move of a job into completed
	// in a table completions (job_id, at): the independent witness that no
	// job completed twice.
	witness []string
}

// testDatabase is a test's own database on a backend's server.
type testDatabase struct {
	// workerURL is the database as the workers reach it, under a name
	// the server shows for each of their connections (and only theirs):
	// what cut looks for.
	workerURL string
	// adminURL is the database as the test itself reaches it.
	adminURL string
	// cut has the server end every connection the workers hold, and
	// returns how many it ended.
	cut func(ctx context.Context) (int, error)
}

// backends are the backends every cluster test runs on, each as a
// subtest; a backend whose server the environment does not name skips.
var backends = []*backend{postgresBackend, mariadbBackend}

// onEachBackend runs test as a subtest per backend.
func onEachBackend(t *testing.T, test func(t *testing.T, b *backend)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { test(t, b) })
	}
}

// backendNamed is the backend a worker process's environment names.
func backendNamed(name string) (*backend, error) {
	for _, b := range backends {
		if b.name == name {
			return b, nil
		}
	}
	return nil, fmt.Errorf("%s=%q names no backend", envBackend, name)
}

var postgresBackend = &backend{
	name: "postgres",
	database: func(t testing.TB) *testDatabase {
		base, schema := pgtest.Schema(t, "twice_cluster")
		app := "twicecw_" + schema
		admin := func(ctx context.Context) (*pgxpool.Pool, error) { return pgxpool.New(ctx, base) }
		return &testDatabase{
			adminURL:  base,
			workerURL: pgtest.WithParams(t, base, map[string]string{"application_name": app}),
			cut: func(ctx context.Context) (int, error) {
				pool, err := admin(ctx)
				if err != nil {
					return 0, err
				}
				defer pool.Close()
				var n int
				err = pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
					WHERE application_name = $1`, app).Scan(&n)
				return n, err
			},
		}
	},
	openStore: func(ctx context.Context, url string) (twicestore.Store, error) { return twicepg.Open(ctx, url) },
	openDB: func(ctx context.Context, url string) (database, error) {
		pool, err := pgxpool.New(ctx, url)
		if err != nil {
			return nil, err
		}
		return pgDatabase{pool}, nil
	},
	witness: pgtest.CompletionWitness,
}

var mariadbBackend = &backend{
	name:      "mariadb",
	database:  mariadbDatabase,
	openStore: openMySQLStore,
	openDB:    openMySQL,
	// A row trigger: MySQL has no statement triggers with transition
	// tables, and needs none (twice_jobs is one table, no partitions). A
	// trigger may write any table but the one that fired it.
	witness: []string{
		`CREATE TABLE completions (job_id bigint NOT NULL, at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6))`,
		`CREATE TRIGGER record_completion AFTER UPDATE ON twice_jobs FOR EACH ROW
			INSERT INTO completions (job_id) SELECT NEW.id FROM DUAL
			WHERE NEW.state = 'completed' AND OLD.state <> 'completed'`,
	},
}

// mariadbDatabase makes a database of the test's own on the
// TWICE_TEST_MYSQL server, and a user of its own for the workers: the
// server's process list names each connection's user and database, so
// cut ends the workers' connections and none of the test's.
func mariadbDatabase(t testing.TB) *testDatabase {
	t.Helper()
	dsn, name := mysqltest.Database(t, "twice_cluster")
	return mariadbDatabaseAt(t, dsn, name)
}

// mariadbDatabaseAt adds the workers' user to the database name that dsn
// opens, and drops the user when the test ends.
func mariadbDatabaseAt(t testing.TB, dsn, name string) *testDatabase {
	t.Helper()
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	password := make([]byte, 12)
	_, _ = rand.Read(password)
	worker := cfg.Clone()
	worker.User = "twicecw_" + hex.EncodeToString(suffix)
	worker.Passwd = hex.EncodeToString(password)
	ctx := context.Background()
	admin, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	for _, stmt := range []string{
		fmt.Sprintf("CREATE USER '%s'@'%%' IDENTIFIED BY '%s'", worker.User, worker.Passwd),
		fmt.Sprintf("GRANT ALL ON `%s`.* TO '%s'@'%%'", name, worker.User),
	} {
		if _, err := admin.ExecContext(ctx, stmt); err != nil {
			t.Fatalf("make the workers' user: %v", err)
		}
	}
	t.Cleanup(func() {
		db, err := sql.Open("mysql", dsn)
		if err != nil {
			return
		}
		defer db.Close()
		_, _ = db.ExecContext(context.Background(), fmt.Sprintf("DROP USER IF EXISTS '%s'@'%%'", worker.User))
	})
	return &testDatabase{
		adminURL:  dsn,
		workerURL: worker.FormatDSN(),
		cut: func(ctx context.Context) (int, error) {
			db, err := sql.Open("mysql", dsn)
			if err != nil {
				return 0, err
			}
			defer db.Close()
			const workers = `SELECT id FROM information_schema.processlist WHERE db = ? AND user = ?`
			rows, err := db.QueryContext(ctx, workers, name, worker.User) //nolint:rowserrcheck // read by dbrows.Collect, which checks Err
			if err != nil {
				return 0, err
			}
			ids, err := dbrows.Collect(rows, dbrows.One[int64])
			if err != nil {
				return 0, err
			}
			n := 0
			for _, id := range ids {
				_, err := db.ExecContext(ctx, "KILL CONNECTION "+strconv.FormatInt(id, 10))
				var me *mysql.MySQLError
				if errors.As(err, &me) && me.Number == 1094 { // unknown thread: it ended by itself
					continue
				}
				if err != nil {
					return n, err
				}
				n++
			}
			return n, nil
		},
	}
}

// mysqlStoreConns bounds each process's store pool on MySQL (Open's is
// twicemysql.MaxOpenConnsDefault): the server's max_connections (151 by
// default) is shared by every worker and sender of a test, and by the
// tests of other packages running at the same time.
const mysqlStoreConns = 12

// openMySQLStore opens twice's store on dsn through a pool of at most
// mysqlStoreConns connections, which its Close closes.
func openMySQLStore(ctx context.Context, dsn string) (twicestore.Store, error) {
	cfg, err := twicemysql.ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(mysqlStoreConns)
	db.SetMaxIdleConns(mysqlStoreConns)
	store, err := twicemysql.New(ctx, db)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	return ownedMySQLStore{store, db}, nil
}

// ownedMySQLStore is a store on a pool of its own: twicemysql.New's Close
// leaves the pool to its owner, which this is.
type ownedMySQLStore struct {
	*twicemysql.Store
	db *sql.DB
}

func (s ownedMySQLStore) Close() error {
	_ = s.Store.Close() // closes nothing of New's
	return s.db.Close()
}

// openMySQL opens a pool on the MySQL or MariaDB database dsn names, with
// few connections: the server's max_connections is shared by every test.
func openMySQL(ctx context.Context, dsn string) (database, error) {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(4)
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, err
	}
	return mysqlDatabase{db}, nil
}

// dialect is the SQL that differs between the backends, for the tables
// the tests add next to twice's.
type dialect struct {
	timestamp string // a column type holding a moment to the microsecond
	now       string // the moment, in UTC on MySQL, where DATETIME has no zone
	serial    string // an auto-numbered bigint id, the table's primary key
}

// database is what the tests and the handlers need of the test's database
// on either backend. Statements are written with PostgreSQL's $n
// placeholders: MySQL's side rebinds them to ?.
type database interface {
	Exec(ctx context.Context, stmt string, args ...any) error
	QueryRow(ctx context.Context, query string, args ...any) dbrows.Scanner
	Query(ctx context.Context, query string, args ...any) (dbrows.Rows, error)
	// InsertID runs an INSERT of one row into a table whose primary key is
	// a serial id, and returns the row's id.
	InsertID(ctx context.Context, stmt string, args ...any) (int64, error)
	Dialect() dialect
	Close()
}

// pgDatabase is a database on PostgreSQL.
type pgDatabase struct{ pool *pgxpool.Pool }

func (d pgDatabase) Exec(ctx context.Context, stmt string, args ...any) error {
	_, err := d.pool.Exec(ctx, stmt, args...)
	return err
}

func (d pgDatabase) QueryRow(ctx context.Context, query string, args ...any) dbrows.Scanner {
	return d.pool.QueryRow(ctx, query, args...)
}

func (d pgDatabase) Query(ctx context.Context, query string, args ...any) (dbrows.Rows, error) {
	return d.pool.Query(ctx, query, args...) //nolint:rowserrcheck // the caller reads them through dbrows
}

// InsertID reads the id back with RETURNING.
func (d pgDatabase) InsertID(ctx context.Context, stmt string, args ...any) (int64, error) {
	var id int64
	err := d.pool.QueryRow(ctx, stmt+" RETURNING id", args...).Scan(&id)
	return id, err
}

func (pgDatabase) Dialect() dialect {
	return dialect{timestamp: "timestamptz", now: "clock_timestamp()", serial: "bigserial PRIMARY KEY"}
}

func (d pgDatabase) Close() { d.pool.Close() }

// mysqlDatabase is a database on MySQL or MariaDB.
type mysqlDatabase struct{ db *sql.DB }

func (d mysqlDatabase) Exec(ctx context.Context, stmt string, args ...any) error {
	q, a := rebind(stmt, args)
	_, err := d.db.ExecContext(ctx, q, a...)
	return err
}

func (d mysqlDatabase) QueryRow(ctx context.Context, query string, args ...any) dbrows.Scanner {
	q, a := rebind(query, args)
	return d.db.QueryRowContext(ctx, q, a...)
}

func (d mysqlDatabase) Query(ctx context.Context, query string, args ...any) (dbrows.Rows, error) {
	q, a := rebind(query, args)
	return d.db.QueryContext(ctx, q, a...) //nolint:rowserrcheck // the caller reads them through dbrows
}

// InsertID reads the id from the statement's LastInsertId: MySQL has no
// RETURNING.
func (d mysqlDatabase) InsertID(ctx context.Context, stmt string, args ...any) (int64, error) {
	q, a := rebind(stmt, args)
	res, err := d.db.ExecContext(ctx, q, a...)
	if err != nil {
		return 0, err
	}
	return res.LastInsertId()
}

func (mysqlDatabase) Dialect() dialect {
	return dialect{timestamp: "DATETIME(6)", now: "UTC_TIMESTAMP(6)", serial: "bigint AUTO_INCREMENT PRIMARY KEY"}
}

func (d mysqlDatabase) Close() { _ = d.db.Close() }

// rebind turns PostgreSQL's numbered placeholders ($1, $2, used in any
// order, any number of times) into MySQL's ?, with the arguments in the
// order the ? stand in. The tests' statements hold no $ in a literal.
func rebind(stmt string, args []any) (string, []any) {
	var (
		b   strings.Builder
		out []any
	)
	for i := 0; i < len(stmt); i++ {
		if stmt[i] != '$' {
			b.WriteByte(stmt[i])
			continue
		}
		j := i + 1
		for j < len(stmt) && stmt[j] >= '0' && stmt[j] <= '9' {
			j++
		}
		n, err := strconv.Atoi(stmt[i+1 : j])
		if err != nil || n < 1 || n > len(args) {
			b.WriteByte(stmt[i])
			continue
		}
		b.WriteByte('?')
		out = append(out, args[n-1])
		i = j - 1
	}
	return b.String(), out
}

// txExec runs stmt in a job's transaction (job.Tx() or twice.StepTx), on
// whichever driver began it.
func txExec(ctx context.Context, jobTx any, stmt string, args ...any) error {
	switch tx := jobTx.(type) {
	case pgx.Tx:
		_, err := tx.Exec(ctx, stmt, args...)
		return err
	case *sql.Tx:
		q, a := rebind(stmt, args)
		_, err := tx.ExecContext(ctx, q, a...)
		return err
	}
	return twice.Permanent(fmt.Errorf("no pgx or database/sql transaction, got %T", jobTx))
}

// postgresOnly skips a test on a backend other than PostgreSQL, saying
// what it needs of PostgreSQL.
func postgresOnly(t *testing.T, b *backend, why string) {
	t.Helper()
	if b != postgresBackend {
		t.Skipf("PostgreSQL only: %s", why)
	}
}

// workerEnv is the environment that tells a worker process its backend.
func (b *backend) workerEnv() string { return envBackend + "=" + b.name }

// getenvBackend is the backend of this worker process.
func getenvBackend() (*backend, error) { return backendNamed(os.Getenv(envBackend)) }
