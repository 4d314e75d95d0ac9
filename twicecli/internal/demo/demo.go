// Package demo is the seed's signup flow, end to end, on one database — a
// SQLite file, a PostgreSQL database or a MySQL/MariaDB database: a signup commits its user row and
// its verification-email job together (the transactional outbox), and three kinds of job — an email sent
// claim-after, an image watermark written content-addressed and a balance
// credit applied transactionally — run on the real twice runtime while
// faults the seed worries about are injected: redelivery of a message, a
// crash between the send and the claim, and transient send failures.
//
// RunOnce runs a scripted scenario and checks that every effect converged
// as its kind's strategy promises; Run keeps producing signups until its
// context ends, for watching the runtime with the CLI.
package demo

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicepg"
	"github.com/twicejobs/twice/twicesqlite"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// ObjectsDirName is the directory, next to a SQLite database, where the
// demo writes watermarked images unless told otherwise. For a PostgreSQL
// database it is under the system's temporary directory, in a
// subdirectory of its own per database URL (see DefaultObjectsDir).
const ObjectsDirName = "twice-demo-objects"

// App is the demo application: its tables live in the same database as
// twice's jobs (a SQLite file, a PostgreSQL or a MySQL database), so its
// writes and its enqueues share transactions.
type App struct {
	db      *sql.DB
	store   twicestore.Store
	dialect dialect
	objects string
	faults  *Faults

	// deliveries counts handler calls per kind.
	deliveries map[string]*atomic.Int64

	// nonIdempotentWatermark makes the watermark handler stamp each run
	// into the image, so a redelivery writes a second object: a broken
	// handler, for showing that the checker catches divergence.
	nonIdempotentWatermark bool
}

// IsPostgresURL reports whether db names a PostgreSQL database (a
// postgres:// or postgresql:// URL) rather than a SQLite file.
func IsPostgresURL(db string) bool {
	return strings.HasPrefix(db, "postgres://") || strings.HasPrefix(db, "postgresql://")
}

// displayDB is db as it may be printed: a URL loses its password.
func displayDB(db string) string {
	if !isURL(db) {
		return db
	}
	u, err := url.Parse(db)
	if err != nil {
		scheme, _, _ := strings.Cut(db, "://")
		return scheme + "://…"
	}
	return u.Redacted()
}

// DefaultObjectsDir is where the demo writes watermarked images for db
// when not told otherwise: ObjectsDirName next to a SQLite file; for a
// PostgreSQL or MySQL URL, ObjectsDirName/<hash of the URL> under the
// system's temporary directory, so two databases never share objects
// (image ids would collide).
func DefaultObjectsDir(db string) string {
	if !isURL(db) {
		return filepath.Join(filepath.Dir(db), ObjectsDirName)
	}
	sum := sha256.Sum256([]byte(db))
	return filepath.Join(os.TempDir(), ObjectsDirName, hex.EncodeToString(sum[:8]))
}

// Open opens the database db names — a SQLite file (created if needed), a
// postgres:// or a mysql:// URL — applies twice's migrations and creates the demo's
// tables that do not exist yet. Watermarked images go to objectsDir, or to
// DefaultObjectsDir(db) when it is empty. Close releases the database.
func Open(ctx context.Context, db, objectsDir string) (*App, error) {
	var (
		a   *App
		err error
	)
	switch {
	case IsPostgresURL(db):
		a, err = openPostgres(ctx, db)
	case IsMySQLURL(db):
		a, err = openMySQL(ctx, db)
	default:
		a, err = openSQLite(ctx, db)
	}
	if err != nil {
		return nil, err
	}
	if err := createSchema(ctx, a.db, a.dialect); err != nil {
		_ = a.Close()
		return nil, err
	}
	if err := switchCreditsOn(ctx, a.store); err != nil {
		_ = a.Close()
		return nil, err
	}
	if objectsDir == "" {
		objectsDir = DefaultObjectsDir(db)
	}
	if err := os.MkdirAll(objectsDir, 0o755); err != nil {
		_ = a.Close()
		return nil, fmt.Errorf("create objects directory: %w", err)
	}
	a.objects = objectsDir
	a.faults = newFaults()
	a.deliveries = map[string]*atomic.Int64{}
	for _, k := range Kinds() {
		a.deliveries[k.Kind()] = new(atomic.Int64)
	}
	return a, nil
}

// openSQLite opens the App's database and store on a SQLite file.
func openSQLite(ctx context.Context, path string) (*App, error) {
	// Open validates the path (a directory that does not exist, a file that
	// is not a database, a schema newer than this binary) with twice's own
	// messages and migrates; the app then opens its own pool on the same
	// file, which the store wraps, so app writes and jobs share transactions.
	check, err := twicesqlite.Open(ctx, path)
	if err != nil {
		return nil, err
	}
	if err := check.Close(); err != nil {
		return nil, fmt.Errorf("open %q: %w", path, err)
	}
	db, err := sql.Open("sqlite", twicesqlite.DSN(path))
	if err != nil {
		return nil, fmt.Errorf("open %q: %w", path, err)
	}
	db.SetMaxIdleConns(16)
	store, err := twicesqlite.New(ctx, db)
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open %q: %w", path, err)
	}
	return &App{db: db, store: store}, nil
}

// openPostgres opens the App's database and store on a PostgreSQL URL:
// twicepg's pool for the store, which validates the URL, connects and
// migrates, and a database/sql pool through pgx's stdlib adapter for the
// application, whose transactions EnqueueTx accepts. Errors never repeat
// the URL, which may hold a password.
func openPostgres(ctx context.Context, connString string) (*App, error) {
	store, err := twicepg.Open(ctx, connString)
	if err != nil {
		return nil, err
	}
	db, err := sql.Open("pgx", connString)
	if err == nil {
		err = db.PingContext(ctx)
		if err != nil {
			_ = db.Close()
		}
	}
	if err != nil {
		_ = store.Close()
		return nil, fmt.Errorf("open demo database: %w", err)
	}
	db.SetMaxIdleConns(16)
	return &App{db: db, store: store, dialect: postgresDialect}, nil
}

// Close closes the database.
func (a *App) Close() error {
	return errors.Join(a.store.Close(), a.db.Close())
}

// DB returns the application's database, which also holds the jobs. On
// PostgreSQL its queries take $1, $2, … placeholders; the demo's own SQL
// uses them on SQLite too, and has them rewritten to ? on MySQL, whose
// queries take those.
func (a *App) DB() *sql.DB { return a.db }

// ObjectsDir returns where watermarked images are written.
func (a *App) ObjectsDir() string { return a.objects }

// Store returns the store to build a client on. Faults injected with the
// App's Faults (crashes between send and claim) act through it.
func (a *App) Store() twicestore.Store {
	fs := &faultStore{Store: a.store, f: a.faults}
	if l, ok := a.store.(twicestore.InsertListener); ok {
		return &faultListener{faultStore: fs, l: l}
	}
	return fs
}

// Faults returns the App's fault injector.
func (a *App) Faults() *Faults { return a.faults }

// Deliveries returns how many times the handler of kind has been called.
func (a *App) Deliveries(kind string) int64 {
	if c := a.deliveries[kind]; c != nil {
		return c.Load()
	}
	return 0
}

func (a *App) delivered(kind string) {
	if c := a.deliveries[kind]; c != nil {
		c.Add(1)
	}
}

// Kinds returns a zero value of each of the demo's args types.
func Kinds() []twice.Args {
	return []twice.Args{VerificationEmail{}, WatermarkImage{}, CreditBalance{}}
}

// switchCreditsOn turns the fail-closed credit kind on in the store, the
// way an operator would, unless a toggle for it is already there (an
// operator's "off" is respected).
func switchCreditsOn(ctx context.Context, store twicestore.Store) error {
	kind := CreditBalance{}.Kind()
	res, err := store.ToggleList(ctx, &twicestore.ToggleListParams{})
	if err != nil {
		return fmt.Errorf("read kill switches: %w", err)
	}
	for _, t := range res.Toggles {
		if t.Kind == kind {
			return nil
		}
	}
	return store.ToggleSet(ctx, &twicestore.ToggleSetParams{Toggle: twicetype.Toggle{
		Kind: kind, Enabled: true, By: "twice demo", At: time.Now(),
		Reason: "the demo's credits are fail-closed; the demo switches them on deliberately",
	}})
}

// NewRegistry returns a registry of the demo's kinds, each with the
// strategy its effect needs and a's handler. With a nil App the registry
// only describes the kinds (the dashboard of 'twice demo' uses it so): its
// handlers dead-letter any job they are given, so never start a worker on
// it.
func NewRegistry(a *App) (*twice.Registry, error) {
	reg := twice.NewRegistry()
	err := errors.Join(
		twice.Register(reg, handler(a, (*App).sendVerification),
			&twice.KindOpts{Strategy: twice.ClaimAfter, Queue: twice.QueueCritical}),
		twice.Register(reg, handler(a, (*App).watermark),
			&twice.KindOpts{Strategy: twice.None, Queue: twice.QueueBulk}),
		twice.Register(reg, handler(a, (*App).credit),
			&twice.KindOpts{Strategy: twice.Transactional, FailClosed: true}),
	)
	if err != nil {
		return nil, err
	}
	return reg, nil
}

// errNoApp is what a handler of a validation-only registry fails with.
var errNoApp = errors.New("this worker has no demo database: start it with `twice serve` or `twice demo`")

// handler adapts an App method to a twice handler that counts deliveries.
func handler[T twice.Args](a *App, run func(*App, context.Context, *twice.Job[T]) error) twice.HandlerFunc[T] {
	return func(ctx context.Context, job *twice.Job[T]) error {
		if a == nil {
			return twice.Permanent(errNoApp)
		}
		a.delivered(job.Kind)
		return run(a, ctx, job)
	}
}
