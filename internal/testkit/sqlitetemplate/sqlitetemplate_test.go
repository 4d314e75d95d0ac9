package sqlitetemplate

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCopyMigratesOnce: the template is made once per name, and each copy
// is a file of its own with the template's bytes.
func TestCopyMigratesOnce(t *testing.T) {
	calls := 0
	migrate := func(path string) error {
		calls++
		return os.WriteFile(path, []byte("migrated"), 0o600)
	}
	a := Copy(t, t.Name(), migrate)
	b := Copy(t, t.Name(), migrate)
	if calls != 1 {
		t.Fatalf("migrate ran %d times, want once", calls)
	}
	if a == b || filepath.Base(a) != fileName {
		t.Fatalf("copies %q and %q: want two files named %s", a, b, fileName)
	}
	if err := os.WriteFile(a, []byte("changed"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(b)
	if err != nil || !bytes.Equal(got, []byte("migrated")) {
		t.Fatalf("second copy reads %q, %v after the first changed; want the template's bytes", got, err)
	}
}

// TestCopyRefusesAnOpenTemplate: a template whose write-ahead log is
// still beside it holds writes the file lacks, and is refused; so is one
// whose migration failed.
func TestCopyRefusesAnOpenTemplate(t *testing.T) {
	for name, migrate := range map[string]func(string) error{
		"wal left": func(path string) error {
			if err := os.WriteFile(path, []byte("db"), 0o600); err != nil {
				return err
			}
			return os.WriteFile(path+"-wal", []byte("log"), 0o600)
		},
		"migrate failed": func(string) error { return errors.New("no such table") },
	} {
		_, err := migrated(migrate)
		if err == nil {
			t.Errorf("%s: made a template, want an error", name)
			continue
		}
		if name == "wal left" && !strings.Contains(err.Error(), "did not close") {
			t.Errorf("%s: %v, want it to say the database was not closed", name, err)
		}
	}
}
