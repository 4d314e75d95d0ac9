package toggles

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/BurntSushi/toml"
)

// fileFormat is the hint every file error ends with.
const fileFormat = `the format is a [toggles] table of "kind" = true (on) or false (off) lines`

// MaxFileBytes is the largest toggles file ParseFile and LoadFile accept,
// 1 MiB: room for some ten thousand kinds, while a larger file is surely
// not a toggles file and would only cost time to decode.
const MaxFileBytes = 1 << 20

// errTooLarge is the error for a file of size bytes, over MaxFileBytes.
func errTooLarge(size int64) error {
	return fmt.Errorf("the file has %d bytes or more, over the limit of %d (1 MiB): a toggles file holds one short line per kind; %s",
		size, MaxFileBytes, fileFormat)
}

// ParseFile parses a toggles file:
//
//	# kind = true (on) or false (off)
//	[toggles]
//	"email.partner-verification.v1" = true
//	"balance.credit.v1" = false
//
// and returns its toggles keyed by lower-cased kind. An empty file (or one
// with an empty or no "toggles" table) has no toggles. It is strict, because
// a key it silently ignored would leave a kind running that the operator
// switched off: invalid TOML, any top-level key but "toggles", a value that
// is not a boolean and two keys differing only in case are all errors, each
// naming its line and key and saying how to fix it (all problems at once,
// joined).
//
// A file over MaxFileBytes is refused, and so is one with a line of more
// than 64 dots outside quotes or brackets nested more than 16 deep: the
// TOML library takes time quadratic (or worse) in those, and no toggles
// file needs them. The file is scanned once for those limits and for the
// line of each key, then decoded once.
func ParseFile(data []byte) (map[string]bool, error) {
	if len(data) > MaxFileBytes {
		return nil, errTooLarge(int64(len(data)))
	}
	text := string(data)
	lines, err := scanFile(text)
	if err != nil {
		return nil, err
	}
	var raw map[string]any
	md, err := toml.Decode(text, &raw)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return nil, fmt.Errorf("line %d: invalid TOML: %s; %s", pe.Position.Line, pe.Message, fileFormat)
		}
		return nil, fmt.Errorf("invalid TOML: %w; %s", err, fileFormat)
	}

	at := func(k toml.Key) string {
		if n := lines[k.String()]; n > 0 {
			return fmt.Sprintf("line %d: ", n)
		}
		return ""
	}

	var problems []error
	out := make(map[string]bool)
	type firstSeen struct {
		key  string
		line int
	}
	lowered := make(map[string]firstSeen)
	badTop := make(map[string]bool)
	judged := make(map[string]bool)
	// md.Keys is in document order, so the problems are too.
	for _, k := range md.Keys() {
		switch {
		case k[0] != "toggles":
			if badTop[k[0]] {
				continue // its sub-keys: the top-level key is reported once
			}
			badTop[k[0]] = true
			hint := `put each kind under [toggles]`
			if editDistance(strings.ToLower(k[0]), "toggles") <= 2 {
				hint = "did you mean [toggles]?"
			}
			problems = append(problems, fmt.Errorf("%sunknown top-level key %q: %s", at(k[:1]), k[0], hint))

		case len(k) == 1:
			if _, ok := raw["toggles"].(map[string]any); !ok {
				problems = append(problems, fmt.Errorf("%s%q is %s, not a table: write [toggles] on a line of its own, then one \"kind\" = true|false line per kind",
					at(k), "toggles", describe(raw["toggles"])))
			}

		default:
			// A bare dotted key lists only its full path, not its parent
			// tables, so each kind is judged by its first key segment once.
			tbl, ok := raw["toggles"].(map[string]any)
			if !ok || judged[k[1]] {
				continue // [[toggles]] is reported at len 1
			}
			judged[k[1]] = true
			k = k[:2]
			kind := k[1]
			v := tbl[kind]
			if sub, ok := v.(map[string]any); ok {
				// A bare dotted key (email.welcome.v1 = false) is nested
				// tables in TOML, not a kind with dots in it.
				dotted := dottedLeaf(k[1:], sub)
				problems = append(problems, fmt.Errorf("%stoggle key %s is not quoted, so TOML reads its dots as nested tables: quote it: %q = true|false",
					at(k), dotted, dotted))
				continue
			}
			lk := strings.ToLower(kind)
			if strings.TrimSpace(lk) == "" {
				problems = append(problems, fmt.Errorf("%sempty toggle key: write the kind between the quotes", at(k)))
				continue
			}
			if first, dup := lowered[lk]; dup {
				where := ""
				if first.line > 0 {
					where = fmt.Sprintf(" (line %d)", first.line)
				}
				problems = append(problems, fmt.Errorf("%stoggle key %q repeats %q%s: keys are case-insensitive; delete one of them",
					at(k), kind, first.key, where))
				continue
			}
			lowered[lk] = firstSeen{key: kind, line: lines[k.String()]}
			b, ok := v.(bool)
			if !ok {
				problems = append(problems, fmt.Errorf("%stoggle %q is %s, not a boolean: write %q = true (on) or false (off), without quotes around the value",
					at(k), kind, describe(v), kind))
				continue
			}
			out[lk] = b
		}
	}
	if len(problems) > 0 {
		return nil, errors.Join(problems...)
	}
	return out, nil
}

// LoadFile reads and parses the toggles file at path. A missing file is no
// toggles, not an error: the file is optional. Callers that want a bad file
// to stop the process at startup call LoadFile before Watch, which only
// reports errors.
func LoadFile(path string) (map[string]bool, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]bool{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read toggles file: %w", err)
	}
	defer func() { _ = f.Close() }() // read only: nothing to lose
	// One byte past the limit is enough to refuse the file, without
	// reading a huge one into memory.
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read toggles file: %w", err)
	}
	m, err := ParseFile(data)
	if err != nil {
		return nil, fmt.Errorf("toggles file %s: %w", path, err)
	}
	return m, nil
}

// describe names a decoded TOML value's type for an error message.
func describe(v any) string {
	switch v := v.(type) {
	case string:
		return fmt.Sprintf("the string %q", v)
	case int64, float64:
		return fmt.Sprintf("the number %v", v)
	case []any, []map[string]any:
		return "an array"
	case map[string]any:
		return "a table"
	case nil:
		return "missing"
	default:
		return fmt.Sprintf("a %T", v)
	}
}

// dottedLeaf rebuilds the kind an operator meant when they wrote a bare
// dotted key: the path down to the first boolean.
func dottedLeaf(path []string, m map[string]any) string {
	parts := append([]string(nil), path...)
	for len(m) == 1 {
		for k, v := range m {
			parts = append(parts, k)
			next, ok := v.(map[string]any)
			if !ok {
				return strings.Join(parts, ".")
			}
			m = next
		}
	}
	return strings.Join(parts, ".")
}
