// Package twicemysql is twice's driver for MySQL 8.0+ and MariaDB 10.6+: it
// implements twicestore.Store through database/sql and
// github.com/go-sql-driver/mysql.
//
// Open is the usual entry point. New wraps a *sql.DB the application
// already has, so jobs can commit in the same transaction as the
// application's own writes (EnqueueTx with a *sql.Tx).
//
// MySQL has no LISTEN/NOTIFY: workers find new jobs by polling (see the
// README's "Running on MySQL/MariaDB"). Every transaction twice begins runs
// at READ COMMITTED, and every statement that decides a job's fate locks
// the rows it reads (FOR UPDATE, SKIP LOCKED for the fetch), so the lease
// epoch fences a lost worker's outcome as on PostgreSQL.
package twicemysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/twicejobs/twice/internal/migrations"
	"github.com/twicejobs/twice/twicestore"
)

// Store is a twicestore.Store on one MySQL or MariaDB database. It is safe
// for concurrent use.
type Store struct {
	*executor
	db     *sql.DB
	ownsDB bool // Open made db, so Close closes it; New's caller owns theirs
}

var _ twicestore.Store = (*Store)(nil)

// Open connects to the database dsn names, checks that the server and the
// connection settings keep twice's promises (see CheckDSN and New), and
// applies twice's migrations that are not applied yet.
//
// dsn is go-sql-driver/mysql's form, user:pass@tcp(host:3306)/db?parseTime=true,
// or a URL, mysql://user:pass@host:3306/db?parseTime=true. It must set
// parseTime=true; Open adds interpolateParams=true unless the DSN says
// otherwise, which saves two round trips a statement. Close releases the
// connections.
func Open(ctx context.Context, dsn string) (*Store, error) {
	cfg, err := ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("open twice database: %w", err)
	}
	db, err := openPool(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open twice database %s: %w", redacted(cfg), err)
	}
	// twice's transactions run at READ COMMITTED. Set on the session, it
	// costs nothing a transaction; set per transaction (BeginTx's
	// isolation), it is a statement more each. So unless the DSN chose a
	// level, the pool is opened again with the session variable set, under
	// the name this server gives it.
	set, err := checkServer(ctx, db)
	if err == nil && set.isolation != "READ-COMMITTED" && !dsnSetsIsolation(cfg) {
		_ = db.Close() // replaced by a pool of READ COMMITTED sessions
		cfg.Params = maps.Clone(cfg.Params)
		if cfg.Params == nil {
			cfg.Params = map[string]string{}
		}
		cfg.Params[set.isolationVar] = "'READ-COMMITTED'"
		if db, err = openPool(ctx, cfg); err != nil {
			return nil, fmt.Errorf("open twice database %s: %w", redacted(cfg), err)
		}
		set, err = checkServer(ctx, db) // and the sessions are what was set
	}
	var s *Store
	if err == nil {
		s, err = newChecked(ctx, db, set)
	}
	if err != nil {
		_ = db.Close() // the set-up's error is the one to report
		return nil, fmt.Errorf("open twice database %s: %w", redacted(cfg), err)
	}
	s.ownsDB = true
	return s, nil
}

// openPool opens a pool on cfg and pings it.
func openPool(ctx context.Context, cfg *mysql.Config) (*sql.DB, error) {
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(MaxOpenConnsDefault)
	db.SetMaxIdleConns(MaxOpenConnsDefault)
	// A server closes idle connections after wait_timeout (8 hours by
	// default); a pool that outlives that hands out dead ones.
	db.SetConnMaxIdleTime(5 * time.Minute)
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close() // the ping's error is the one to report
		return nil, err
	}
	return db, nil
}

// dsnSetsIsolation reports whether the DSN sets the session's isolation.
func dsnSetsIsolation(cfg *mysql.Config) bool {
	for name := range cfg.Params {
		if n := strings.ToLower(name); n == "transaction_isolation" || n == "tx_isolation" {
			return true
		}
	}
	return false
}

// MaxOpenConnsDefault is how many connections Open keeps at most. A worker
// holds one per transaction in flight; the rest wait in database/sql.
const MaxOpenConnsDefault = 32

// New returns a Store on a database the application opened itself with
// go-sql-driver/mysql, after checking the server and the session settings
// (see CheckDSN for what is refused) and applying twice's migrations. Open
// the database with parseTime=true.
//
// The caller keeps ownership of db: the Store's Close does not close it.
func New(ctx context.Context, db *sql.DB) (*Store, error) {
	if db == nil {
		return nil, errors.New("twicemysql.New: db is nil")
	}
	if _, ok := db.Driver().(*mysql.MySQLDriver); !ok {
		return nil, fmt.Errorf("twicemysql.New: db uses driver %T; open it with github.com/go-sql-driver/mysql (driver name \"mysql\")", db.Driver())
	}
	return newStore(ctx, db)
}

func newStore(ctx context.Context, db *sql.DB) (*Store, error) {
	set, err := checkServer(ctx, db)
	if err != nil {
		return nil, err
	}
	return newChecked(ctx, db, set)
}

// newChecked returns a migrated Store on db, whose server and sessions
// checkServer passed with set.
func newChecked(ctx context.Context, db *sql.DB, set serverSettings) (*Store, error) {
	opts := txOptions
	if set.isolation == "READ-COMMITTED" {
		opts = nil // the sessions are at READ COMMITTED already
	}
	s := &Store{executor: &executor{db: db, pool: db, txOpts: opts}, db: db}
	if err := migrations.Upgrade(ctx, s); err != nil {
		return nil, err
	}
	return s, nil
}

// txOptions is how twice begins its own transactions on sessions that are
// not at READ COMMITTED already (a pool given to New): READ COMMITTED, so
// a statement that locks rows reads their latest committed version and
// a locking scan does not keep locks on the rows it passed over.
var txOptions = &sql.TxOptions{Isolation: sql.LevelReadCommitted}

// Begin starts a transaction at READ COMMITTED. Its Unwrap returns the
// *sql.Tx, so a handler can write its own effect in it.
func (s *Store) Begin(ctx context.Context) (twicestore.Tx, error) {
	tx, err := s.db.BeginTx(ctx, s.txOpts)
	if err != nil {
		return nil, fmt.Errorf("begin: %w", mapError(err))
	}
	return &mysqlTx{executor: &executor{db: tx}, tx: tx}, nil
}

// ExecutorFromTx returns an Executor that runs inside tx, a *sql.Tx the
// caller began on this database (or a twicestore.Tx this Store began). Any
// other type is refused with an error wrapping twicestore.ErrWrongTx.
func (s *Store) ExecutorFromTx(tx any) (twicestore.Executor, error) {
	switch tx := tx.(type) {
	case *sql.Tx:
		if tx == nil {
			break
		}
		return &executor{db: tx}, nil
	case *mysqlTx:
		if tx == nil {
			break
		}
		return tx.executor, nil
	}
	return nil, fmt.Errorf("%w: got %T, want *sql.Tx", twicestore.ErrWrongTx, tx)
}

// Ping fails when the database cannot be reached.
func (s *Store) Ping(ctx context.Context) error {
	return s.db.PingContext(ctx)
}

// Close closes the database if Open opened it; a database passed to New is
// left open for its owner.
func (s *Store) Close() error {
	if !s.ownsDB {
		return nil
	}
	return s.db.Close()
}

// mysqlTx is a transaction twice began.
type mysqlTx struct {
	*executor
	tx *sql.Tx
}

func (t *mysqlTx) Unwrap() any { return t.tx }

func (t *mysqlTx) Commit(context.Context) error { return mapError(t.tx.Commit()) }

func (t *mysqlTx) Rollback(context.Context) error { return t.tx.Rollback() }

// dbtx is what queries need from a *sql.DB or a *sql.Tx.
type dbtx interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// executor runs twice's queries on db. When db is the pool, pool is set
// too, and the operations that write several statements begin their own
// transaction on it; inside a transaction they join it.
type executor struct {
	db   dbtx
	pool *sql.DB
	// txOpts begins the pool's transactions: nil when its sessions are at
	// READ COMMITTED, else txOptions. Set on the pool's executor only.
	txOpts *sql.TxOptions
}

var _ twicestore.Executor = (*executor)(nil)

// inTx runs fn in one transaction: the executor's own when it has one,
// otherwise a new one at READ COMMITTED, committed when fn returns nil.
// Before the commit it settles the composition the statements of fn set
// off (settleComposition: batch callbacks, workflow tasks now ready), so
// every write path that moves a job leaves its batch and workflow right.
// A deadlock InnoDB broke by rolling back this transaction is retried
// from the start, a few times: nothing of it was written.
func (e *executor) inTx(ctx context.Context, fn func(q dbtx) error) error {
	return e.inTxUnsettled(ctx, func(q dbtx) error {
		if err := fn(q); err != nil {
			return err
		}
		return settleComposition(ctx, q)
	})
}

// inTxUnsettled is inTx without the settling of composition, for a
// transaction that moves no job between unfinished and finished (a fetch,
// a lease extension) or that settles by itself (JobFinish): it saves a
// statement a transaction on the hot path.
func (e *executor) inTxUnsettled(ctx context.Context, run func(q dbtx) error) error {
	if e.pool == nil {
		return mapError(run(e.db))
	}
	var err error
	for attempt := 0; attempt < deadlockRetries; attempt++ {
		if attempt > 0 {
			if werr := deadlockBackoff(ctx, attempt); werr != nil {
				return mapError(err)
			}
		}
		err = e.txOnce(ctx, run)
		if !isDeadlock(err) {
			break
		}
	}
	return mapError(err)
}

// deadlockBackoff waits a random while, up to 2^attempt ms, before a
// deadlock's victim runs again. Run again at once, the victims of a race
// (inserters of one unique key, which all hold the gap the key goes in
// and all wait to insert there) meet in the same deadlock again and again
// until the retries run out.
func deadlockBackoff(ctx context.Context, attempt int) error {
	t := time.NewTimer(time.Duration(rand.Int64N(int64(time.Millisecond) << attempt)))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// deadlockRetries is how many times inTx runs a transaction that InnoDB
// keeps choosing as a deadlock's victim.
const deadlockRetries = 5

func (e *executor) txOnce(ctx context.Context, fn func(q dbtx) error) error {
	tx, err := e.pool.BeginTx(ctx, e.txOpts)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback() // fn's error is the one to report
		return err
	}
	return tx.Commit()
}

// nullTime is how an optional time is bound: NULL for the zero time, else
// the time in UTC at the microsecond precision DATETIME(6) keeps.
func nullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return dbTime(t)
}

// dbTime is how a time is bound: in UTC (the DSN's loc, which CheckDSN
// requires to be UTC), truncated to the microsecond DATETIME(6) keeps.
func dbTime(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// nowOr returns t, or the current time when t is zero.
func nowOr(t time.Time) time.Time {
	if t.IsZero() {
		return time.Now()
	}
	return t
}

// nullID is how an optional id is bound: NULL for 0.
func nullID(id int64) any {
	if id == 0 {
		return nil
	}
	return id
}
