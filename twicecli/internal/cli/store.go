package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicepg"
	"github.com/twicejobs/twice/twicesqlite"
	"github.com/twicejobs/twice/twicestore"
)

// openStore opens the --db database: a postgres:// URL with twicepg,
// anything else as a SQLite file. Commands that only read or change
// existing jobs refuse a file that does not exist instead of creating an
// empty database at a mistyped path; migrate, serve and demo create it.
// Other failures (a missing directory, a file that is not a database, a
// schema newer than this binary) are the driver's to explain.
func (c *cli) openStore(ctx context.Context, create bool) (twicestore.Store, error) {
	if isPostgresURL(c.db) {
		store, err := twicepg.Open(ctx, c.db)
		if err != nil {
			return nil, err
		}
		return store, nil
	}
	if !create && dirExists(filepath.Dir(c.db)) {
		if _, err := os.Stat(c.db); errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("database %q does not exist: create it with '%s migrate --db %s', or point --db (or TWICE_DB) at an existing one", c.db, c.name, c.db)
		}
	}
	return twicesqlite.Open(ctx, c.db)
}

// isPostgresURL reports whether --db names a PostgreSQL database.
func isPostgresURL(db string) bool {
	return strings.HasPrefix(db, "postgres://") || strings.HasPrefix(db, "postgresql://")
}

// displayDB is --db as it may be printed: a URL loses its password.
func displayDB(db string) string {
	if !isPostgresURL(db) {
		return db
	}
	u, err := url.Parse(db)
	if err != nil {
		return "postgres://…"
	}
	return u.Redacted()
}

func dirExists(dir string) bool {
	fi, err := os.Stat(dir)
	return err == nil && fi.IsDir()
}

// openClient opens the --db database and a client on it, with this
// binary's registry, that serves the admin API without running a worker:
// what every command that reads or acts on jobs, queues, switches and
// schedules goes through. Its log (every admin action, with who and why)
// goes to stderr at --log-level, by default error: a command's own output
// says what it did, and a failure is one line. close closes the store.
func (c *cli) openClient(cmd *cobra.Command) (client *twice.Client, closeFn func(), err error) {
	logger, err := c.logger(cmd, slog.LevelError)
	if err != nil {
		return nil, nil, err
	}
	store, err := c.openStore(cmd.Context(), false)
	if err != nil {
		return nil, nil, err
	}
	client, err = twice.NewClient(store, twice.Config{Registry: c.reg, Logger: logger, Queues: c.cfg.Queues, DefaultQueue: c.cfg.DefaultQueue,
		WaitTokenKey: c.waitTokenKey()})
	if err != nil {
		_ = store.Close()
		return nil, nil, err
	}
	return client, func() { _ = store.Close() }, nil // a read's close fails nothing
}
