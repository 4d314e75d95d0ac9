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
	"github.com/twicejobs/twice/twicemysql"
	"github.com/twicejobs/twice/twicepg"
	"github.com/twicejobs/twice/twicesqlite"
	"github.com/twicejobs/twice/twicestore"
)

// openStore opens the --db database: a postgres:// URL with twicepg, a
// mysql:// or mariadb:// URL with twicemysql, anything else as a SQLite
// file. Commands that only read or change existing jobs refuse a file that
// does not exist instead of creating an empty database at a mistyped path;
// migrate, serve and demo create it. A MySQL URL twicemysql refuses before
// connecting (no parseTime=true, no database, a setting that breaks
// twice's promises) is bad input; other failures (a missing directory, a
// file that is not a database, a server that cannot be reached, a schema
// newer than this binary) are the driver's to explain.
func (c *cli) openStore(ctx context.Context, create bool) (twicestore.Store, error) {
	if isPostgresURL(c.db) {
		store, err := twicepg.Open(ctx, c.db)
		if err != nil {
			return nil, err
		}
		return store, nil
	}
	if err := checkDBURL(c.db); err != nil {
		return nil, err
	}
	if isMySQLURL(c.db) {
		store, err := twicemysql.Open(ctx, c.db)
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

// isMySQLURL reports whether --db names a MySQL or MariaDB database.
func isMySQLURL(db string) bool {
	return strings.HasPrefix(db, "mysql://") || strings.HasPrefix(db, "mariadb://")
}

// looksLikeMySQLDSN reports whether --db is in go-sql-driver's own form,
// user:pass@tcp(host:3306)/db, which --db does not take: it would be
// opened as a SQLite file of that name.
func looksLikeMySQLDSN(db string) bool {
	return strings.Contains(db, "@tcp(") || strings.Contains(db, "@unix(")
}

// checkDBURL refuses, before connecting, a MySQL --db that
// twicemysql.Open would refuse for its text alone (no parseTime=true, no
// database, loc other than UTC, a non-strict sql_mode or READ-UNCOMMITTED
// set in it), and a go-sql-driver DSN, which --db would take for a SQLite
// file's name: bad input, exit status 2, with the driver's message saying
// what to change.
func checkDBURL(db string) error {
	if isMySQLURL(db) {
		if _, err := twicemysql.ParseDSN(db); err != nil {
			return usagef("--db %s: %w", displayDB(db), err)
		}
	} else if looksLikeMySQLDSN(db) {
		return usagef("--db %s looks like a go-sql-driver DSN: give it as a URL, mysql://user:pass@host:3306/db?parseTime=true", displayDB(db))
	}
	return nil
}

// displayDB is --db as it may be printed: a URL loses its password, and so
// does a go-sql-driver DSN given by mistake.
func displayDB(db string) string {
	if !strings.Contains(db, "://") && looksLikeMySQLDSN(db) {
		// go-sql-driver splits the credentials off at the last '@'.
		at := strings.LastIndex(db, "@")
		if user, _, hasPassword := strings.Cut(db[:at], ":"); hasPassword {
			return user + ":xxxxx" + db[at:]
		}
		return db
	}
	if !isPostgresURL(db) && !isMySQLURL(db) {
		return db
	}
	u, err := url.Parse(db)
	if err != nil {
		scheme, _, _ := strings.Cut(db, "://")
		return scheme + "://…"
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
