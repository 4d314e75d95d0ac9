// Package sqlitetemplate gives a test a fresh, migrated SQLite database by
// copying one that was migrated once per test binary, instead of running
// every migration again for each test. A copy is byte for byte the file a
// fresh migration writes; the migrations keep tests of their own.
//
// The template is kept in memory (a migrated database is a few hundred
// kilobytes), so nothing is left on disk when the test binary ends.
package sqlitetemplate

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// template is the bytes of one database migrated once.
type template struct {
	once  sync.Once
	bytes []byte
	err   error
}

var (
	mu        sync.Mutex
	templates = map[string]*template{}
)

// fileName is the name of a copy in its test's temp dir.
const fileName = "twice.db"

// Copy returns the path of a new database file in t.TempDir() that is a
// copy of the template called name. The first call for a name makes the
// template: migrate is given a path in a new directory, must create and
// migrate the database there, and must close it, so that everything it
// wrote is in that one file.
func Copy(t testing.TB, name string, migrate func(path string) error) string {
	t.Helper()
	mu.Lock()
	tp := templates[name]
	if tp == nil {
		tp = &template{}
		templates[name] = tp
	}
	mu.Unlock()
	tp.once.Do(func() { tp.bytes, tp.err = migrated(migrate) })
	if tp.err != nil {
		t.Fatalf("sqlitetemplate: make template %q: %v", name, tp.err)
	}
	dst := filepath.Join(t.TempDir(), fileName)
	if err := os.WriteFile(dst, tp.bytes, 0o600); err != nil {
		t.Fatalf("sqlitetemplate: copy template %q: %v", name, err)
	}
	return dst
}

// migrated runs migrate in a new directory and returns the file it wrote.
func migrated(migrate func(path string) error) ([]byte, error) {
	dir, err := os.MkdirTemp("", "twice-template-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(dir) }() // a temporary file: nothing to lose
	path := filepath.Join(dir, fileName)
	if err := migrate(path); err != nil {
		return nil, err
	}
	// A database closed by its last connection has no write-ahead log
	// left beside it; one that has holds writes the file lacks.
	if _, err := os.Stat(path + "-wal"); err == nil {
		return nil, fmt.Errorf("%s-wal exists: migrate did not close the database", path)
	}
	return os.ReadFile(path)
}
