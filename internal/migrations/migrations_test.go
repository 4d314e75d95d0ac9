package migrations

import (
	"strings"
	"testing"
	"testing/fstest"
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
