package migrations

import (
	"errors"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/twicejobs/twice/twicestore"
)

func TestLoad(t *testing.T) {
	t.Parallel()
	ok := fstest.MapFS{
		"m/002_more.sql":    {Data: []byte("B")},
		"m/001_initial.sql": {Data: []byte("A")},
	}
	ms, err := Load(ok, "m")
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 || ms[0].Version != 1 || ms[0].Name != "001_initial" || ms[0].SQL != "A" || ms[1].Version != 2 {
		t.Fatalf("Load = %+v", ms)
	}
	tests := []struct {
		name string
		fsys fstest.MapFS
		want string
	}{
		{"misnamed", fstest.MapFS{"m/initial.sql": {}}, "not named NNN_name.sql"},
		{"not sql", fstest.MapFS{"m/001_initial.txt": {}}, "not named NNN_name.sql"},
		{"gap", fstest.MapFS{"m/001_a.sql": {}, "m/003_c.sql": {}}, "should have version 2"},
	}
	for _, tt := range tests {
		if _, err := Load(tt.fsys, "m"); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err = %v, want %q", tt.name, err, tt.want)
		}
	}
}

// TestRun checks that Run applies and records only the missing
// migrations, in order, and refuses a database past them untouched.
func TestRun(t *testing.T) {
	t.Parallel()
	all := []Migration{{Version: 1, Name: "001_a"}, {Version: 2, Name: "002_b"}, {Version: 3, Name: "003_c"}}
	run := func(applied int) ([]string, error) {
		var did []string
		err := Run(all, Steps{
			Applied:     func() (int, error) { return applied, nil },
			CreateTable: func() error { did = append(did, "create"); return nil },
			Apply:       func(m Migration) error { did = append(did, "apply "+m.Name); return nil },
			Record:      func(m Migration) error { did = append(did, "record "+m.Name); return nil },
		})
		return did, err
	}
	did, err := run(1)
	if want := "create,apply 002_b,record 002_b,apply 003_c,record 003_c"; err != nil || strings.Join(did, ",") != want {
		t.Fatalf("from 1: %q, %v; want %q", did, err, want)
	}
	if did, err := run(3); err != nil || len(did) != 0 {
		t.Fatalf("up to date: %q, %v", did, err)
	}
	if did, err := run(4); !errors.Is(err, twicestore.ErrSchemaTooNew) || len(did) != 0 {
		t.Fatalf("too new: %q, %v", did, err)
	}
}
