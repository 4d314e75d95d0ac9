// Package migrations reads a driver's embedded schema migrations: files
// named NNN_name.sql, numbered from 001 without gaps. Each driver owns its
// SQL and how it applies it; this package only loads and checks the files.
package migrations

import (
	"context"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/twicejobs/twice/twicestore"
)

// Migration is one migration file.
type Migration struct {
	Version int    // NNN
	Name    string // the file name without .sql
	SQL     string
}

// Load reads the migrations in dir of fsys, in version order. It fails on a
// misnamed file or a missing version.
func Load(fsys fs.FS, dir string) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, err
	}
	var ms []Migration
	for _, e := range entries {
		name := e.Name()
		num, _, ok := strings.Cut(name, "_")
		version, err := strconv.Atoi(num)
		if !ok || err != nil || !strings.HasSuffix(name, ".sql") {
			return nil, fmt.Errorf("migration %q is not named NNN_name.sql", name)
		}
		body, err := fs.ReadFile(fsys, path.Join(dir, name))
		if err != nil {
			return nil, err
		}
		ms = append(ms, Migration{Version: version, Name: strings.TrimSuffix(name, ".sql"), SQL: string(body)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	for i, m := range ms {
		if m.Version != i+1 {
			return nil, fmt.Errorf("migration %q should have version %d", m.Name, i+1)
		}
	}
	return ms, nil
}

// MustLoad is Load for embedded files, which only a broken build can get
// wrong: it panics, naming the driver.
func MustLoad(driver string, fsys fs.FS, dir string) []Migration {
	ms, err := Load(fsys, dir)
	if err != nil {
		panic(driver + ": " + err.Error())
	}
	return ms
}

// TooNew is the error of a database a newer twice migrated: it wraps
// twicestore.ErrSchemaTooNew and says what to do.
func TooNew(applied, latest int) error {
	return fmt.Errorf("%w (database at version %d, this binary at %d): upgrade twice",
		twicestore.ErrSchemaTooNew, applied, latest)
}

// Versioned is a store that reports its schema version and migrates.
type Versioned interface {
	SchemaVersion(ctx context.Context) (applied, latest int, err error)
	Migrate(ctx context.Context) error
}

// Upgrade migrates s when it opens: it checks the version first, so a
// database of a newer twice is refused without taking the migration lock,
// then applies what is missing.
func Upgrade(ctx context.Context, s Versioned) error {
	applied, latest, err := s.SchemaVersion(ctx)
	if err != nil {
		return err
	}
	if applied > latest {
		return TooNew(applied, latest)
	}
	return s.Migrate(ctx)
}

// Steps is how a driver applies migrations, with its migration lock held
// (and, where its database allows, in one transaction).
type Steps struct {
	// Applied reads the highest version applied, 0 when there is none.
	Applied func() (int, error)
	// CreateTable creates twice_migrations unless it exists.
	CreateTable func() error
	// Apply runs a migration's SQL.
	Apply func(m Migration) error
	// Record adds a migration's row to twice_migrations, applied now.
	Record func(m Migration) error
}

// Run applies the migrations of all past the applied version, in order,
// each recorded after it runs. It changes nothing when none is missing, and
// returns TooNew's error, changing nothing, when the database is past all.
func Run(all []Migration, s Steps) error {
	applied, err := s.Applied()
	if err != nil {
		return err
	}
	latest := len(all)
	if applied > latest {
		return TooNew(applied, latest)
	}
	if applied == latest {
		return nil
	}
	if err := s.CreateTable(); err != nil {
		return fmt.Errorf("migrate: create twice_migrations: %w", err)
	}
	for _, m := range all[applied:] {
		if err := s.Apply(m); err != nil {
			return fmt.Errorf("migrate: apply %s: %w", m.Name, err)
		}
		if err := s.Record(m); err != nil {
			return fmt.Errorf("migrate: record %s: %w", m.Name, err)
		}
	}
	return nil
}
