package cli

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

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
			return nil, fmt.Errorf("database %q does not exist: create it with 'twice migrate --db %s', or point --db (or TWICE_DB) at an existing one", c.db, c.db)
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
