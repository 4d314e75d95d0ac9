package toggles

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/BurntSushi/toml"
)

// Limits of the shapes scanFile lets through to the TOML decoder, which
// takes time quadratic in the parts of a dotted key (a 20,000-part key in
// a 40 KB file took 56 s) and worse in the depth of nested inline tables.
// A toggles file has one quoted kind per line and one level of brackets.
const (
	maxDotsPerLine = 64
	maxNesting     = 16
)

// scanFile makes one pass over a toggles file. It refuses a line with more
// than maxDotsPerLine dots outside quotes and comments, and brackets or
// braces nested deeper than maxNesting, before the TOML decoder sees them.
// It also maps each key the file defines, and its parent table, to the
// line it is first defined on (as toml.Key.String()), since the TOML
// library does not report key positions: error messages name that line.
//
// It is a lexer for TOML's strings, comments and brackets, not a parser:
// whatever it cannot make sense of is left for the decoder to report, and
// a key it cannot read just gets an error message without a line number.
func scanFile(text string) (map[string]int, error) {
	lines := make(map[string]int)
	var table []string
	line, depth, dots := 1, 0, 0
	atStatement := true // at the start of a line, outside brackets
	for i := 0; i < len(text); {
		c := text[i]
		switch {
		case c == '\n':
			line++
			dots = 0
			atStatement = depth == 0
			i++
		case c == ' ' || c == '\t' || c == '\r':
			i++
		case c == '#':
			for i < len(text) && text[i] != '\n' {
				i++
			}
		case atStatement:
			// Read the key this line defines, then scan the line as any
			// other from the same place.
			atStatement = false
			if c == '[' {
				j := i + 1
				if j < len(text) && text[j] == '[' {
					j++
				}
				if path, end, ok := scanKey(text, j); ok && end < len(text) && text[end] == ']' {
					table = path
					recordKey(lines, path, line)
				}
			} else if path, end, ok := scanKey(text, i); ok && end < len(text) && text[end] == '=' {
				recordKey(lines, append(table[:len(table):len(table)], path...), line)
			}
		case c == '"' || c == '\'':
			end, newlines := skipString(text, i)
			i = end
			line += newlines
		case c == '[' || c == '{':
			depth++
			if depth > maxNesting {
				return nil, fmt.Errorf("line %d: brackets or braces nested more than %d deep: a toggles file needs one level; %s",
					line, maxNesting, fileFormat)
			}
			i++
		case c == ']' || c == '}':
			if depth > 0 {
				depth--
			}
			i++
		case c == '.':
			dots++
			if dots > maxDotsPerLine {
				return nil, fmt.Errorf("line %d: more than %d dots outside quotes: quote each kind, as in \"email.welcome.v1\" = false; %s",
					line, maxDotsPerLine, fileFormat)
			}
			i++
		default:
			i++
		}
	}
	return lines, nil
}

// recordKey maps the first two parts of path (the top-level key, and the
// kind under [toggles]) to line unless an earlier line defined them: the
// messages ParseFile writes name no deeper key.
func recordKey(lines map[string]int, path []string, line int) {
	for n := 1; n <= min(2, len(path)); n++ {
		k := toml.Key(path[:n]).String()
		if _, ok := lines[k]; !ok {
			lines[k] = line
		}
	}
}

// scanKey reads a TOML key (bare, quoted or dotted) starting at text[i],
// after any blanks, and returns its parts and the index of the first
// character after it and its trailing blanks. ok is false when no key
// starts there or a part cannot be read.
func scanKey(text string, i int) (path []string, end int, ok bool) {
	i = skipBlanks(text, i)
	for {
		if i >= len(text) {
			return nil, i, false
		}
		var part string
		switch c := text[i]; {
		case c == '"':
			j := i + 1
			for j < len(text) && text[j] != '"' && text[j] != '\n' {
				if text[j] == '\\' && j+1 < len(text) && text[j+1] != '\n' {
					j++
				}
				j++
			}
			if j >= len(text) || text[j] != '"' {
				return nil, j, false
			}
			s, err := unescape(text[i+1 : j])
			if err != nil {
				return nil, j, false
			}
			part, i = s, j+1
		case c == '\'':
			j := strings.IndexAny(text[i+1:], "'\n")
			if j < 0 || text[i+1+j] != '\'' {
				return nil, i, false
			}
			part, i = text[i+1:i+1+j], i+j+2
		case isBare(c):
			j := i
			for j < len(text) && isBare(text[j]) {
				j++
			}
			part, i = text[i:j], j
		default:
			return nil, i, false
		}
		if len(path) == maxDotsPerLine {
			return nil, i, false // the line is refused for its dots
		}
		path = append(path, part)
		i = skipBlanks(text, i)
		if i >= len(text) || text[i] != '.' {
			return path, i, true
		}
		i = skipBlanks(text, i+1)
	}
}

// isBare reports whether c may appear in a bare key.
func isBare(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-'
}

// skipBlanks returns the index of the first character at or after i that
// is not a space or tab.
func skipBlanks(text string, i int) int {
	for i < len(text) && (text[i] == ' ' || text[i] == '\t') {
		i++
	}
	return i
}

// skipString returns the index just past the string starting at text[i]
// (basic or literal, single- or multi-line) and the newlines it spans. A
// single-line string ends at the end of its line even when unterminated:
// the decoder reports that.
func skipString(text string, i int) (end, newlines int) {
	q := text[i]
	triple := strings.Repeat(string(q), 3)
	if strings.HasPrefix(text[i:], triple) {
		j := i + 3
		for j < len(text) {
			switch {
			case q == '"' && text[j] == '\\' && j+1 < len(text):
				if text[j+1] == '\n' {
					newlines++
				}
				j += 2
			case strings.HasPrefix(text[j:], triple):
				j += 3
				// Up to two more quotes belong to the content.
				for k := 0; k < 2 && j < len(text) && text[j] == q; k++ {
					j++
				}
				return j, newlines
			default:
				if text[j] == '\n' {
					newlines++
				}
				j++
			}
		}
		return j, newlines
	}
	j := i + 1
	for j < len(text) && text[j] != '\n' {
		switch {
		case q == '"' && text[j] == '\\' && j+1 < len(text) && text[j+1] != '\n':
			j += 2
		case text[j] == q:
			return j + 1, 0
		default:
			j++
		}
	}
	return min(j, len(text)), 0
}

// unescape decodes the escapes of a TOML basic string's content.
func unescape(s string) (string, error) {
	if !strings.Contains(s, `\`) {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			b.WriteByte(s[i])
			continue
		}
		i++
		if i >= len(s) {
			return "", fmt.Errorf("escape at the end")
		}
		hex := 0
		switch s[i] {
		case 'b':
			b.WriteByte('\b')
		case 't':
			b.WriteByte('\t')
		case 'n':
			b.WriteByte('\n')
		case 'f':
			b.WriteByte('\f')
		case 'r':
			b.WriteByte('\r')
		case 'e':
			b.WriteByte(0x1b)
		case '"':
			b.WriteByte('"')
		case '\\':
			b.WriteByte('\\')
		case 'x':
			hex = 2
		case 'u':
			hex = 4
		case 'U':
			hex = 8
		default:
			return "", fmt.Errorf("unknown escape \\%c", s[i])
		}
		if hex == 0 {
			continue
		}
		if i+1+hex > len(s) {
			return "", fmt.Errorf("short escape")
		}
		n, err := strconv.ParseUint(s[i+1:i+1+hex], 16, 32)
		if err != nil || !utf8.ValidRune(rune(n)) {
			return "", fmt.Errorf("bad escape")
		}
		b.WriteRune(rune(n))
		i += hex
	}
	return b.String(), nil
}
