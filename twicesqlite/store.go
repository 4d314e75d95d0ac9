// Package twicesqlite is twice's embedded storage driver: it implements
// twicestore.Store on one SQLite file through modernc.org/sqlite, in pure Go,
// with no cgo and no server to run.
//
// Open is the usual entry point. New wraps a *sql.DB the application already
// has, so jobs can commit in the same transaction as the application's own
// writes (the transactional outbox).
package twicesqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"modernc.org/sqlite"

	"github.com/twicejobs/twice/internal/migrations"
	"github.com/twicejobs/twice/twicestore"
)

// BusyTimeoutDefault is how long a connection opened with DSN waits for
// another writer to release the database before it reports SQLITE_BUSY.
const BusyTimeoutDefault = 10 * time.Second

// sqliteHeader is the first 16 bytes of every SQLite 3 database file.
const sqliteHeader = "SQLite format 3\x00"

// DSN returns the modernc.org/sqlite data source name twice recommends for the
// database file at path:
//
//   - _pragma=busy_timeout(10000): writers queue for up to
//     BusyTimeoutDefault instead of failing at once with SQLITE_BUSY;
//   - _pragma=foreign_keys(1): constraints are enforced;
//   - _pragma=journal_mode(WAL): readers never block the writer;
//   - _txlock=immediate: every transaction takes the write lock when it
//     begins, so two transactions that read and then write cannot deadlock
//     on the upgrade (in WAL mode one of them would fail with SQLITE_BUSY
//     without waiting).
//
// Applications that pass their own *sql.DB to New should open it with this
// DSN, or at least with busy_timeout and _txlock=immediate.
func DSN(path string) string {
	// A file: URI keeps a '?' or '#' in the path from being read as the
	// start of the query or fragment. URIs use forward slashes, and a
	// Windows drive letter needs a leading one ("file:/C:/data/twice.db").
	p := filepath.ToSlash(path)
	if filepath.VolumeName(path) != "" && !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	escaped := strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(p)
	return "file:" + escaped +
		fmt.Sprintf("?_pragma=busy_timeout(%d)", BusyTimeoutDefault.Milliseconds()) +
		"&_pragma=foreign_keys(1)" +
		"&_pragma=journal_mode(WAL)" +
		"&_txlock=immediate"
}

// Store is a twicestore.Store on one SQLite database. It is safe for
// concurrent use.
type Store struct {
	*executor
	db     *sql.DB
	ownsDB bool // Open made db, so Close closes it; New's caller owns theirs
}

var _ twicestore.Store = (*Store)(nil)

// Open opens the SQLite database at path, creating the file when it does not
// exist, and applies twice's migrations that are not applied yet.
//
// It fails, without changing the file, when path is not a SQLite database and
// when the database was migrated by a newer twice (the error then wraps
// twicestore.ErrSchemaTooNew). Close releases the database.
func Open(ctx context.Context, path string) (*Store, error) {
	if err := checkPath(path); err != nil {
		return nil, fmt.Errorf("open twice database %q: %w", path, err)
	}
	db, err := sql.Open("sqlite", DSN(path))
	if err != nil {
		return nil, fmt.Errorf("open twice database %q: %w", path, err)
	}
	// Connections are cheap to keep and costly to reopen (each one runs the
	// DSN's pragmas), so keep more idle than database/sql's default of 2.
	db.SetMaxIdleConns(16)
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close() // the ping's error is the one to report
		return nil, fmt.Errorf("open twice database %q: %w", path, openError(err))
	}
	s, err := newStore(ctx, db)
	if err != nil {
		_ = db.Close() // the set-up's error is the one to report
		return nil, fmt.Errorf("open twice database %q: %w", path, err)
	}
	s.ownsDB = true
	return s, nil
}

// New returns a Store on a database the application opened itself with
// modernc.org/sqlite (driver name "sqlite"), after applying twice's
// migrations to it. Open the database with DSN(path) or with equivalent
// options (see DSN); without _txlock=immediate, concurrent transactions can
// fail with SQLITE_BUSY instead of waiting.
//
// The caller keeps ownership of db: the Store's Close does not close it.
func New(ctx context.Context, db *sql.DB) (*Store, error) {
	if db == nil {
		return nil, errors.New("twicesqlite.New: db is nil")
	}
	if _, ok := db.Driver().(*sqlite.Driver); !ok {
		return nil, fmt.Errorf("twicesqlite.New: db uses driver %T; open it with modernc.org/sqlite (driver name \"sqlite\")", db.Driver())
	}
	return newStore(ctx, db)
}

func newStore(ctx context.Context, db *sql.DB) (*Store, error) {
	cache := newStmtCache(db)
	s := &Store{executor: &executor{db: &prepared{cache: cache}, pool: db, gate: make(writeGate, 1), cache: cache}, db: db}
	if err := migrations.Upgrade(ctx, s); err != nil {
		return nil, err
	}
	return s, nil
}

// checkPath fails with a short explanation when path cannot hold a SQLite
// database. It reads at most the file's header and never writes, so a file
// that is not a database is left exactly as it was.
func checkPath(path string) error {
	if path == "" {
		return errors.New("path is empty")
	}
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		dir := filepath.Dir(path)
		di, err := os.Stat(dir)
		switch {
		case errors.Is(err, os.ErrNotExist):
			return fmt.Errorf("directory %q does not exist: create it first", dir)
		case err != nil:
			return pathErr(err)
		case !di.IsDir():
			return fmt.Errorf("%q is not a directory", dir)
		}
		return nil
	}
	if err != nil {
		return pathErr(err)
	}
	if fi.IsDir() {
		return errors.New("path is a directory, not a file")
	}
	if fi.Size() == 0 {
		return nil // SQLite treats an empty file as a new database
	}
	f, err := os.Open(path)
	if err != nil {
		return pathErr(err)
	}
	defer func() { _ = f.Close() }() // opened to read the header only
	header := make([]byte, len(sqliteHeader))
	if _, err := io.ReadFull(f, header); err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return pathErr(err)
	}
	if string(header) != sqliteHeader {
		return errors.New("file is not a SQLite database")
	}
	return nil
}

// pathErr drops the path an *os.PathError repeats, since the caller's
// message already names it.
func pathErr(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// openError turns SQLite's errors on open into the one-line messages a
// user can act on.
func openError(err error) error {
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqliteNotADB:
			return errors.New("file is not a SQLite database")
		case sqliteCantOpen:
			return fmt.Errorf("cannot open the file (check the path and its permissions): %w", err)
		}
	}
	return err
}

// dataError marks SQLite's refusals of a value (too big, of the wrong
// type) as twicestore.ErrUnstorable: the same write fails the same way on
// every try. SQLite stores any bytes as text, so it refuses less than
// PostgreSQL; the runtime cleans what it writes so both store the same.
func dataError(err error) error {
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqliteTooBig, sqliteMismatch:
			return twicestore.Unstorable(err)
		}
	}
	return err
}

// Primary SQLite result codes, from sqlite3.h.
const (
	sqliteCantOpen = 14
	sqliteTooBig   = 18
	sqliteMismatch = 20
	sqliteNotADB   = 26
)

// Begin starts a transaction. Its Unwrap returns the *sql.Tx, so a handler
// can write its own effect in it.
func (s *Store) Begin(ctx context.Context) (twicestore.Tx, error) {
	unlock, err := s.gate.lock(ctx)
	if err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		unlock()
		return nil, fmt.Errorf("begin: %w", err)
	}
	return &sqliteTx{executor: &executor{db: &prepared{cache: s.cache, tx: tx}, cache: s.cache}, tx: tx, unlock: unlock}, nil
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
	case *sqliteTx:
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

// Close closes the statements the Store keeps prepared, and the database
// if Open opened it; a database passed to New is left open for its owner.
func (s *Store) Close() error {
	err := s.cache.Close()
	if !s.ownsDB {
		return err
	}
	return errors.Join(err, s.db.Close())
}

// sqliteTx is a transaction twice began.
type sqliteTx struct {
	*executor
	tx     *sql.Tx
	unlock func() // releases the Store's write gate; safe to call twice
}

func (t *sqliteTx) Unwrap() any { return t.tx }

func (t *sqliteTx) Commit(context.Context) error {
	defer t.unlock()
	return t.tx.Commit()
}

func (t *sqliteTx) Rollback(context.Context) error {
	defer t.unlock()
	return t.tx.Rollback()
}

// dbtx is what queries need from a *sql.DB or a *sql.Tx.
type dbtx interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	PrepareContext(ctx context.Context, query string) (*sql.Stmt, error)
}

// executor runs twice's queries on db. When db is the pool, pool is set too,
// and the operations that write several statements begin their own
// transaction on it; inside a transaction they join it.
type executor struct {
	db   dbtx
	pool *sql.DB
	gate writeGate // set on the pool's executor only
	// cache keeps the Store's statements prepared (see prepared.go); nil
	// in an executor of a transaction the application began.
	cache *stmtCache
}

// writeGate serialises this process's writers before they reach SQLite.
// SQLite allows one writer per file; writers that find it locked sleep in
// SQLite's busy handler for milliseconds at a time, so in-process writers
// queue here instead and are woken the moment the writer before them is
// done. Writers in other processes still meet at SQLite's lock.
type writeGate chan struct{}

// lock waits for the gate, for at most the busy timeout, like SQLite would.
// A nil gate (inside a transaction, which holds the lock already) is free.
func (g writeGate) lock(ctx context.Context) (unlock func(), err error) {
	if g == nil {
		return func() {}, nil
	}
	t := time.NewTimer(BusyTimeoutDefault)
	defer t.Stop()
	select {
	case g <- struct{}{}:
		var once sync.Once
		return func() { once.Do(func() { <-g }) }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-t.C:
		return nil, fmt.Errorf("database is locked: another write transaction of this process has held it for %s", BusyTimeoutDefault)
	}
}

// write runs fn holding the write gate.
func (e *executor) write(ctx context.Context, fn func() error) error {
	unlock, err := e.gate.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	return fn()
}

var _ twicestore.Executor = (*executor)(nil)

// inTx runs fn in one transaction: the executor's own when it has one,
// otherwise a new one committed when fn returns nil.
func (e *executor) inTx(ctx context.Context, fn func(q dbtx) error) error {
	if e.pool == nil {
		return dataError(fn(e.db))
	}
	return dataError(e.write(ctx, func() error {
		tx, err := e.pool.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("begin: %w", err)
		}
		if err := fn(&prepared{cache: e.cache, tx: tx}); err != nil {
			tx.Rollback()
			return err
		}
		return tx.Commit()
	}))
}

// direct runs a writing fn on the executor's database or transaction as it
// is, holding the write gate when on the pool.
func (e *executor) direct(ctx context.Context, fn func(q dbtx) error) error {
	return dataError(e.write(ctx, func() error { return fn(e.db) }))
}

// micros is how a time is stored: unix microseconds, the precision both
// drivers keep.
func micros(t time.Time) int64 { return t.UnixMicro() }

// nowOr returns t, or the current time when t is zero.
func nowOr(t time.Time) time.Time {
	if t.IsZero() {
		return time.Now()
	}
	return t
}
