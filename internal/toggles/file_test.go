package toggles

import (
	"fmt"
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

// pathological are inputs the TOML decoder takes quadratic time or worse
// on; ParseFile refuses each in one linear scan. The first is the audit's:
// a 40 KB file with a 20,000-part key, which took 56 s to parse.
var pathological = []struct {
	name, data, want string
}{
	{"20,000-part bare key", "[toggles]\n" + strings.Repeat("a.", 20_000) + "a = true\n",
		"line 2: more than 64 dots outside quotes"},
	{"20,000-part quoted key", "[toggles]\n" + strings.Repeat(`"a".`, 20_000) + "a = true\n",
		"line 2: more than 64 dots outside quotes"},
	{"20,000-part table header", "[" + strings.Repeat("a.", 20_000) + "a]\n",
		"line 1: more than 64 dots outside quotes"},
	{"inline tables 10,000 deep", "[toggles]\nx = " + strings.Repeat("{a=", 10_000) + "1" + strings.Repeat("}", 10_000) + "\n",
		"line 2: brackets or braces nested more than 16 deep"},
	{"arrays 10,000 deep", "[toggles]\nx = " + strings.Repeat("[", 10_000) + strings.Repeat("]", 10_000) + "\n",
		"line 2: brackets or braces nested more than 16 deep"},
	{"over MaxFileBytes", "[toggles]\n" + strings.Repeat("# padding\n", MaxFileBytes/10),
		"over the limit of 1048576 (1 MiB)"},
}

func TestParseFilePathological(t *testing.T) {
	t.Parallel()
	for _, tc := range pathological {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseFile([]byte(tc.data))
			if err == nil {
				t.Fatalf("got %v, want an error", got)
			}
			for _, w := range []string{tc.want, `"kind" = true (on) or false (off)`} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\ndoes not contain %q", err, w)
				}
			}
		})
	}
}

// TestParseFileLines: the line named in an error is the key's, past
// multi-line strings, escapes in keys and comments that look like keys.
func TestParseFileLines(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, data, want string
	}{
		{"escaped key", "[toggles]\n\"caf\\u00e9.v1\" = 1\n", `line 2: toggle "café.v1" is the number 1`},
		{"after a multi-line string", "[toggles]\n\"a.v1\" = \"\"\"\n\"b.v1\" = 1\n\"\"\"\n\"c.v1\" = 2\n",
			`line 5: toggle "c.v1" is the number 2`},
		{"after a multi-line literal string", "[toggles]\n\"a.v1\" = '''\nx\n'''\n\"b.v1\" = 0\n",
			`line 5: toggle "b.v1" is the number 0`},
		{"after a multi-line array", "[toggles]\n\"a.v1\" = [\n  1,\n  2,\n]\n\"b.v1\" = 3\n",
			`line 6: toggle "b.v1" is the number 3`},
		{"commented-out key first", "[toggles]\n# \"a.v1\" = true\n\"a.v1\" = 4\n",
			`line 3: toggle "a.v1" is the number 4`},
		{"dotted key with blanks", "[toggles]\nemail . welcome = false\n",
			`line 2: toggle key email.welcome is not quoted`},
		{"literal key", "[toggles]\n'x.v1' = 5\n", `line 2: toggle "x.v1" is the number 5`},
		{"table header with blanks", "[ toggle ]\n", `line 1: unknown top-level key "toggle"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseFile([]byte(tc.data))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v\nwant it to contain %q", err, tc.want)
			}
		})
	}
}

func TestLoadFileTooLarge(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "toggles.toml")
	if err := os.WriteFile(path, []byte("[toggles]\n"+strings.Repeat("#", 2*MaxFileBytes)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := LoadFile(path)
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "over the limit of 1048576 (1 MiB)") {
		t.Fatalf("got %v, want an error naming the file and the limit", err)
	}
}

// BenchmarkParseFile measures the audit's pathological input (refused in
// one scan) and a valid file of 10,000 kinds (about 330 KB) for scale.
func BenchmarkParseFile(b *testing.B) {
	var valid strings.Builder
	valid.WriteString("# kind = true (on) or false (off)\n[toggles]\n")
	for i := range 10_000 {
		fmt.Fprintf(&valid, "\"service-%d.operation.v1\" = %t # note\n", i, i%2 == 0)
	}
	for _, in := range []struct {
		name, data string
		wantErr    bool
	}{
		{"20000-part-key-40KB", pathological[0].data, true},
		{"valid-10000-kinds", valid.String(), false},
	} {
		b.Run(in.name, func(b *testing.B) {
			data := []byte(in.data)
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if _, err := ParseFile(data); (err != nil) != in.wantErr {
					b.Fatalf("ParseFile error %v, want error %t", err, in.wantErr)
				}
			}
		})
	}
}
