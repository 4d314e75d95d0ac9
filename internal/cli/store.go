package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/twicejobs/twice/twicesqlite"
)

// openStore opens the --db database. Commands that only read or change
// existing jobs refuse a file that does not exist instead of creating an
// empty database at a mistyped path; migrate, serve and demo create it.
// Other failures (a missing directory, a file that is not a database, a
// schema newer than this binary) are twicesqlite.Open's to explain.
func (c *cli) openStore(ctx context.Context, create bool) (*twicesqlite.Store, error) {
	if !create && dirExists(filepath.Dir(c.db)) {
		if _, err := os.Stat(c.db); errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("database %q does not exist: create it with 'twice migrate --db %s', or point --db (or TWICE_DB) at an existing one", c.db, c.db)
		}
	}
	return twicesqlite.Open(ctx, c.db)
}

func dirExists(dir string) bool {
	fi, err := os.Stat(dir)
	return err == nil && fi.IsDir()
}
