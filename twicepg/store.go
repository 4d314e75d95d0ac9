// Package twicepg is twice's PostgreSQL storage driver: it implements
// twicestore.Store, and the optional twicestore.InsertListener, on a
// PostgreSQL database through pgx v5, for any number of worker processes on
// any number of hosts.
//
// Open is the usual entry point; New wraps a *pgxpool.Pool the application
// already has, so jobs can commit in the same transaction as the
// application's own writes (ExecutorFromTx takes a pgx.Tx, or a *sql.Tx
// opened through pgx's database/sql adapter, github.com/jackc/pgx/v5/stdlib).
//
// # Schema
//
// twice's tables (twice_jobs, twice_markers, twice_nodes, twice_toggles,
// twice_schedules, twice_idempotency, twice_migrations) live in the connection's current
// schema: the first schema of its search_path that exists, usually public. To keep twice in a schema of its
// own, or to give each test one, set search_path in the connection string:
//
//	postgres://app@db/app?search_path=twice
//
// pgx sends it as a run-time parameter of every connection the pool opens.
// The schema must exist: twice does not create schemas, because that needs
// a privilege application roles often lack. A transaction passed to
// ExecutorFromTx must see the same search_path.
//
// # Wake-ups
//
// An insert sends pg_notify with the queue name as payload, on the channel
// twice_insert (in the public schema; twice_insert.<schema> otherwise, so
// installations sharing a database do not wake each other). PostgreSQL
// serialises the commits of transactions that notify, WAL flush included,
// so an insert on the Store itself does not notify in its own statement:
// once it has committed, one sender per Store notifies its queues, one
// statement at a time, each covering every insert committed while the one
// before was in flight. An insert in a caller's transaction notifies in
// that transaction, so the notification is delivered on commit and never
// for a rollback; those skip a queue notified less than 2ms before, and a
// skipped one is covered by the notification sent just before it once that
// one's transaction commits. Close sends what the sender still holds
// before it closes the pool (for at most 2 seconds), so an insert from a
// process that exits right after it still wakes the workers. When a
// notification is lost, or its
// transaction rolls back, the workers' polling covers the gap, as it
// covers a lost connection.
// ListenInserts receives the notifications.
//
// PostgreSQL 12 or later is required.
package twicepg

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/twicejobs/twice/internal/dbrows"
	"github.com/twicejobs/twice/internal/migrations"
	"github.com/twicejobs/twice/twicestore"
)

// Store is a twicestore.Store on one PostgreSQL database (and schema). It is
// safe for concurrent use.
type Store struct {
	*executor
	pool     *pgxpool.Pool
	ownsPool bool // Open made pool, so Close closes it; New's caller owns theirs
	schema   string

	// onListen, when set (by tests), is called each time ListenInserts has
	// a connection listening, with that connection's backend process id.
	onListen func(pid uint32)
}

var (
	_ twicestore.Store          = (*Store)(nil)
	_ twicestore.InsertListener = (*Store)(nil)
)

// Open connects to the PostgreSQL database that connString names (a URL or
// keyword/value string, as pgxpool.ParseConfig takes, including pool_max_conns
// and run-time parameters such as search_path) and applies twice's
// migrations that are not applied yet. The pool holds at most pool_max_conns
// connections (pgxpool's default: 4, or the number of CPUs if more), plus
// one per running ListenInserts.
//
// It fails, without changing the database, when the database was migrated
// by a newer twice (the error then wraps twicestore.ErrSchemaTooNew). Close
// releases the connections.
func Open(ctx context.Context, connString string) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		// pgx's message does not repeat the connection string, which may
		// hold a password.
		return nil, fmt.Errorf("open twice database: %w", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open twice database: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open twice database: %w", err)
	}
	s, err := newStore(ctx, pool)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("open twice database: %w", err)
	}
	s.ownsPool = true
	return s, nil
}

// New returns a Store on a pool the application made itself, after applying
// twice's migrations to the pool's current schema. The caller keeps
// ownership of pool: the Store's Close does not close it.
func New(ctx context.Context, pool *pgxpool.Pool) (*Store, error) {
	if pool == nil {
		return nil, errors.New("twicepg.New: pool is nil")
	}
	return newStore(ctx, pool)
}

func newStore(ctx context.Context, pool *pgxpool.Pool) (*Store, error) {
	if err := checkServerVersion(ctx, pgxQuerier{pool}); err != nil {
		return nil, err
	}
	schema, err := currentSchema(ctx, pgxQuerier{pool})
	if err != nil {
		return nil, err
	}
	s := &Store{
		executor: &executor{q: pgxQuerier{pool}, notify: newNotifier(schema), floors: newFetchFloors()},
		pool:     pool,
		schema:   schema,
	}
	if err := migrations.Upgrade(ctx, s); err != nil {
		return nil, err
	}
	return s, nil
}

// minServerVersion is the oldest PostgreSQL twice runs on, as
// server_version_num: 13 is the first whose partitioned tables take a
// BEFORE ROW trigger (twice_jobs_claim_key, migrations 022 and 023).
// twice is tested on 15.
const minServerVersion = 130000

// checkServerVersion refuses a server older than minServerVersion, before
// any migration can fail half-way on it.
func checkServerVersion(ctx context.Context, q querier) error {
	var num int
	var version string
	if err := q.queryRow(ctx, `SELECT current_setting('server_version_num')::int, current_setting('server_version')`).Scan(&num, &version); err != nil {
		return fmt.Errorf("open twice database: read the server's version: %w", err)
	}
	return serverVersionProblem(num, version)
}

// serverVersionProblem says what is wrong with a server of version num
// (server_version_num) and version (server_version), or nil.
func serverVersionProblem(num int, version string) error {
	if num < minServerVersion {
		return fmt.Errorf("open twice database: the server runs PostgreSQL %s; twice needs PostgreSQL 13 or later (it is tested on 15): upgrade the server", version)
	}
	return nil
}

// currentSchema returns the schema twice's tables are (or will be) in.
func currentSchema(ctx context.Context, q querier) (string, error) {
	var (
		schema sql.NullString
		path   string
	)
	if err := q.queryRow(ctx, `SELECT current_schema(), current_setting('search_path')`).Scan(&schema, &path); err != nil {
		return "", fmt.Errorf("read current schema: %w", err)
	}
	if !schema.Valid {
		return "", fmt.Errorf("search_path %q names no existing schema: create the schema first (CREATE SCHEMA ...) or fix search_path", path)
	}
	return schema.String, nil
}

// Begin starts a transaction. Its Unwrap returns the pgx.Tx, so a handler
// can write its own effect in it.
//
// A MarkerClaim in a transaction Begin started waits at most
// ClaimLockTimeout for another transaction's claim of the same marker that
// is not committed yet: see ClaimLockTimeout.
func (s *Store) Begin(ctx context.Context) (twicestore.Tx, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	return &pgTx{executor: &executor{q: pgxQuerier{tx}, notify: s.notify, floors: s.floors, claimLockTimeout: ClaimLockTimeout}, tx: tx}, nil
}

// ExecutorFromTx returns an Executor that runs inside tx, which is a pgx.Tx
// the caller began on this database, a *sql.Tx opened through pgx's
// database/sql adapter (github.com/jackc/pgx/v5/stdlib), or a
// twicestore.Tx this Store began. Any other type is refused with an error
// wrapping twicestore.ErrWrongTx.
func (s *Store) ExecutorFromTx(tx any) (twicestore.Executor, error) {
	switch tx := tx.(type) {
	case *pgTx:
		if tx != nil {
			return tx.executor, nil
		}
	case pgx.Tx:
		return &executor{q: pgxQuerier{tx}, notify: s.notify, floors: s.floors}, nil
	case *sql.Tx:
		if tx != nil {
			return &executor{q: sqlQuerier{tx}, notify: s.notify, floors: s.floors}, nil
		}
	}
	return nil, fmt.Errorf("%w: got %T, want a pgx.Tx or a *sql.Tx of github.com/jackc/pgx/v5/stdlib", twicestore.ErrWrongTx, tx)
}

// Ping fails when the database cannot be reached.
func (s *Store) Ping(ctx context.Context) error {
	return s.pool.Ping(ctx)
}

// Close first sends the wake-ups of the inserts committed on the Store
// that are still pending (waiting at most 2 seconds), so a process that
// enqueues and exits at once still wakes the workers; then it closes the
// pool if Open made it. A pool passed to New is left open for its owner. A
// ListenInserts still running keeps its connection until its context is
// done.
func (s *Store) Close() error {
	s.notify.close(closeFlushTimeout)
	if s.ownsPool {
		s.pool.Close()
	}
	return nil
}

// pgTx is a transaction twice began.
type pgTx struct {
	*executor
	tx pgx.Tx
}

func (t *pgTx) Unwrap() any                        { return t.tx }
func (t *pgTx) Commit(ctx context.Context) error   { return t.tx.Commit(ctx) }
func (t *pgTx) Rollback(ctx context.Context) error { return t.tx.Rollback(ctx) }

// executor runs twice's queries on q: the pool, or a transaction. Almost
// every operation is one statement, atomic on its own; ScheduleTick, which
// writes several, runs them in one transaction (see inTx).
type executor struct {
	q      querier
	notify *notifier // shared by the Store and every executor it hands out
	// floors, shared the same way, start the fetch past the entries of
	// jobs it leased before (fetchfloor.go).
	floors *fetchFloors
	// claimLockTimeout, when positive, bounds MarkerClaim's wait for a
	// claim another transaction has not committed (set by Begin).
	claimLockTimeout time.Duration
}

var _ twicestore.Executor = (*executor)(nil)

// querier is what twice's queries need, from pgx (a pool or a pgx.Tx) or
// from database/sql (a *sql.Tx of pgx's stdlib adapter). Both hand their
// arguments to pgx's encoder, so arrays such as []int64 work in either; the
// queries scan only types both can produce (no arrays: those are selected
// as JSON text).
type querier interface {
	exec(ctx context.Context, sql string, args ...any) (rowsAffected int64, err error)
	query(ctx context.Context, sql string, args ...any) (rows, error)
	queryRow(ctx context.Context, sql string, args ...any) row
}

// row is one row of a result: dbrows.Scanner, so the driver's scan
// functions serve dbrows.Collect as they are.
type row = dbrows.Scanner

// rows is a query's result, read through dbrows (Iter, Collect), which
// closes it and hands over the error that ended it.
type rows interface {
	dbrows.Rows
	Close()
}

// pgxConn is the query surface pgxpool.Pool and pgx.Tx share.
type pgxConn interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

type pgxQuerier struct{ c pgxConn }

func (q pgxQuerier) exec(ctx context.Context, sql string, args ...any) (int64, error) {
	return repeatedExec(ctx, autocommits(q.c), func() (int64, error) {
		tag, err := q.c.Exec(ctx, sql, args...)
		return tag.RowsAffected(), err
	})
}

func (q pgxQuerier) query(ctx context.Context, sql string, args ...any) (rows, error) {
	return runQuery(ctx, autocommits(q.c), func() (rows, error) {
		r, err := q.c.Query(ctx, sql, args...) //nolint:rowserrcheck // the caller reads the rows, and checks Err
		if err != nil {
			return nil, err
		}
		return r, nil
	})
}

func (q pgxQuerier) queryRow(ctx context.Context, sql string, args ...any) row {
	return runQueryRow(ctx, autocommits(q.c), func() row { return q.c.QueryRow(ctx, sql, args...) })
}

// sqlConn is the query surface *sql.DB, *sql.Conn and *sql.Tx share.
type sqlConn interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

type sqlQuerier struct{ c sqlConn }

func (q sqlQuerier) exec(ctx context.Context, sql string, args ...any) (int64, error) {
	return repeatedExec(ctx, autocommits(q.c), func() (int64, error) {
		r, err := q.c.ExecContext(ctx, sql, args...)
		if err != nil {
			return 0, err
		}
		return r.RowsAffected()
	})
}

func (q sqlQuerier) query(ctx context.Context, sql string, args ...any) (rows, error) {
	return runQuery(ctx, autocommits(q.c), func() (rows, error) {
		r, err := q.c.QueryContext(ctx, sql, args...) //nolint:rowserrcheck // the caller reads the rows, and checks Err
		if err != nil {
			return nil, err
		}
		return sqlRows{r}, nil
	})
}

func (q sqlQuerier) queryRow(ctx context.Context, sql string, args ...any) row {
	return runQueryRow(ctx, autocommits(q.c), func() row { return q.c.QueryRowContext(ctx, sql, args...) })
}

// dataError marks PostgreSQL's refusals of a value as
// twicestore.ErrUnstorable: its data exceptions (SQLSTATE class 22: a NUL
// byte or bytes that are not UTF-8 in text, "\u0000" in jsonb, a number
// out of range) and program_limit_exceeded (54000: an index row too
// large). The same write fails the same way on every try, so the
// completer must not retry it; every query of the driver goes through
// here, so no caller has to know the codes.
func dataError(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (strings.HasPrefix(pe.Code, "22") || pe.Code == "54000") {
		return twicestore.Unstorable(err)
	}
	return err
}

// dataRow is a row whose Scan reports data exceptions as dataError does.
type dataRow struct{ row }

func (r dataRow) Scan(dest ...any) error { return dataError(r.row.Scan(dest...)) }

// dataRows is rows whose errors are reported as dataError does.
type dataRows struct{ rows }

func (r dataRows) Scan(dest ...any) error { return dataError(r.rows.Scan(dest...)) }
func (r dataRows) Err() error             { return dataError(r.rows.Err()) }

// sqlRows gives *sql.Rows pgx's Close, which reports nothing: its error, if
// any, is Err's.
type sqlRows struct{ *sql.Rows }

func (r sqlRows) Close() { _ = r.Rows.Close() }

// isNoRows reports whether err says a single-row query found nothing, from
// either pgx or database/sql.
func isNoRows(err error) bool {
	return errors.Is(err, pgx.ErrNoRows) || errors.Is(err, sql.ErrNoRows)
}

// nowOr returns t, or the current time when t is zero.
func nowOr(t time.Time) time.Time {
	if t.IsZero() {
		return time.Now()
	}
	return t
}

// limitArg turns a Limit where zero or less means "no limit" into a LIMIT
// parameter: NULL is no limit in PostgreSQL.
func limitArg(limit int) any {
	if limit <= 0 {
		return nil
	}
	return limit
}
