package toggles

import (
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseFile(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		data string
		want map[string]bool
	}{
		{"empty file", "", map[string]bool{}},
		{"comments only", "# nothing switched\n", map[string]bool{}},
		{"empty table", "[toggles]\n", map[string]bool{}},
		{"the documented format", `# kind = true (on) or false (off)
[toggles]
"email.partner-verification.v1" = true
"balance.credit.v1" = false
`, map[string]bool{"email.partner-verification.v1": true, "balance.credit.v1": false}},
		{"keys lower-cased", "[toggles]\n\"Email.Welcome.V1\" = false\n", map[string]bool{"email.welcome.v1": false}},
		{"bare key without dots", "[toggles]\nsimple = true\n", map[string]bool{"simple": true}},
		{"literal-string key, trailing comment", "[toggles]\n'balance.debit.v1' = false # smtp down\n", map[string]bool{"balance.debit.v1": false}},
		{"inline table", "toggles = { \"a.v1\" = true, \"b.v1\" = false }\n", map[string]bool{"a.v1": true, "b.v1": false}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseFile([]byte(tc.data))
			if err != nil {
				t.Fatalf("ParseFile: %v", err)
			}
			if !maps.Equal(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestParseFileErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		data string
		want []string // substrings of the error, each required
	}{
		{"invalid TOML", "[toggles]\n\"a.v1\" = tru\n",
			[]string{"line 2", "invalid TOML", `"kind" = true (on) or false (off)`}},
		{"exact duplicate", "[toggles]\n\"a.v1\" = true\n\"a.v1\" = false\n",
			[]string{"line 3", "already been defined"}},
		{"duplicate differing in case", "[toggles]\n\"balance.credit.v1\" = false\n\n\"Balance.Credit.v1\" = true\n",
			[]string{`line 4: toggle key "Balance.Credit.v1" repeats "balance.credit.v1" (line 2)`, "case-insensitive", "delete one"}},
		{"unknown top-level key", "debug = true\n[toggles]\n\"a.v1\" = true\n",
			[]string{`line 1: unknown top-level key "debug"`, "put each kind under [toggles]"}},
		{"misspelt table", "[toggle]\n\"a.v1\" = false\n",
			[]string{`line 1: unknown top-level key "toggle"`, "did you mean [toggles]?"}},
		{"kind outside the table", "\"a.v1\" = false\n[toggles]\n",
			[]string{`line 1: unknown top-level key "a.v1"`}},
		{"string value", "[toggles]\n\"a.v1\" = true\n\"b.v1\" = \"false\"\n",
			[]string{`line 3: toggle "b.v1" is the string "false", not a boolean`, `write "b.v1" = true (on) or false (off)`}},
		{"number value", "[toggles]\n\"a.v1\" = 0\n",
			[]string{`line 2: toggle "a.v1" is the number 0, not a boolean`}},
		{"array value", "[toggles]\n\"a.v1\" = [true]\n",
			[]string{`line 2: toggle "a.v1" is an array, not a boolean`}},
		{"bare dotted key", "[toggles]\nemail.welcome.v1 = false\n",
			[]string{`line 2: toggle key email.welcome.v1 is not quoted`, `quote it: "email.welcome.v1" = true|false`}},
		{"toggles not a table", "toggles = true\n",
			[]string{`line 1: "toggles" is a bool, not a table`, "write [toggles] on a line of its own"}},
		{"array of tables", "[[toggles]]\n\"a.v1\" = true\n",
			[]string{`line 1: "toggles" is an array, not a table`}},
		{"empty key", "[toggles]\n\"\" = true\n",
			[]string{"line 2: empty toggle key"}},
		{"every problem at once", "debug = 1\n[toggles]\n\"a.v1\" = \"no\"\n\"b.v1\" = 2\n\"A.v1\" = true\n",
			[]string{"line 1: unknown", "line 3: toggle \"a.v1\"", "line 4: toggle \"b.v1\"", `line 5: toggle key "A.v1" repeats "a.v1" (line 3)`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseFile([]byte(tc.data))
			if err == nil {
				t.Fatalf("got %v, want an error", got)
			}
			if got != nil {
				t.Errorf("got toggles %v alongside the error", got)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\ndoes not contain %q", err, w)
				}
			}
		})
	}
}

func TestLoadFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()

	got, err := LoadFile(filepath.Join(dir, "missing.toml"))
	if err != nil || got == nil || len(got) != 0 {
		t.Fatalf("missing file: got %v, %v; want an empty map, no error", got, err)
	}

	bad := filepath.Join(dir, "bad.toml")
	if err := os.WriteFile(bad, []byte("[toggles]\n\"a.v1\" = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadFile(bad); err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("bad file: got %v, want an error naming the file and line", err)
	}

	if _, err := LoadFile(dir); err == nil {
		t.Fatal("a directory: got no error")
	}
}
