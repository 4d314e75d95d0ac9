package cli

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twiceweb"
)

// The JSON API's tokens (twiceweb.Options.APITokens) come from a file
// (--api-token-file), one a line, and from TWICE_API_TOKENS, comma
// separated; both are read and their tokens combined, so a token can be
// rotated by adding the new one in one place before removing the old one
// from the other. An entry is "TOKEN" or "NAME TOKEN": NAME is recorded as
// who acted, and a bare token is named "token-" and the first 8 hex digits
// of its SHA-256, which names it in logs without telling it.

// apiTokensEnv is the environment variable that lists API tokens.
const apiTokensEnv = "TWICE_API_TOKENS"

// dashboardTokenName is the name twiceweb gives Options.BearerToken
// (--token) and refuses for an API token.
const dashboardTokenName = "bearer-token"

// apiTokenFileMaxBytes bounds a token file: thousands of tokens.
const apiTokenFileMaxBytes = 1 << 20

// apiTokenHint says how to make a good token.
const apiTokenHint = "generate one with 'openssl rand -hex 32'"

// apiTokenSource is one place tokens are read from, for messages.
type apiTokenSource struct {
	where string           // "--api-token-file /etc/twice/tokens" or "TWICE_API_TOKENS"
	entry func(int) string // names the i-th entry: "line 3", "entry 2"
}

// readAPITokens reads the tokens of the file at path (none when path is
// empty) and of env, the value of TWICE_API_TOKENS (none when empty). It
// refuses, as a usage error saying what to do, a file it cannot read, a
// source that is given but holds no token, a malformed entry, and a name
// or token given twice.
func readAPITokens(flag, path, env string) ([]twiceweb.APIToken, error) {
	var tokens []twiceweb.APIToken
	var from []string // where tokens[i] was given, for messages
	if path != "" {
		text, err := readTokenFile(path)
		if err != nil {
			return nil, usagef("%s %s: %v", flag, path, err)
		}
		src := apiTokenSource{where: flag + " " + path, entry: func(i int) string { return fmt.Sprintf("line %d", i+1) }}
		if tokens, from, err = parseAPITokens(src, strings.Split(text, "\n"), tokens, from); err != nil {
			return nil, err
		}
	}
	if env != "" {
		src := apiTokenSource{where: apiTokensEnv, entry: func(i int) string { return fmt.Sprintf("entry %d", i+1) }}
		var err error
		if tokens, from, err = parseAPITokens(src, strings.Split(env, ","), tokens, from); err != nil {
			return nil, err
		}
	}
	for i, t := range tokens {
		for j := range i {
			switch {
			case tokens[j].Name == t.Name:
				return nil, usagef("API token name %q is given twice (%s and %s): give each token its own name", t.Name, from[j], from[i])
			case tokens[j].Token == t.Token:
				return nil, usagef("one API token is given twice (%s and %s): list each token once", from[j], from[i])
			}
		}
	}
	return tokens, nil
}

// readTokenFile reads a token file, with an error that says what to do.
func readTokenFile(path string) (string, error) {
	f, err := os.Open(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", errors.New("no such file: give the path of a file with one API token a line")
	case errors.Is(err, fs.ErrPermission):
		return "", errors.New("permission denied: make the file readable by the user the dashboard runs as")
	case err != nil:
		return "", fmt.Errorf("cannot open it (%w): give a readable file with one API token a line", err)
	}
	defer func() { _ = f.Close() }()
	b, err := io.ReadAll(io.LimitReader(f, apiTokenFileMaxBytes+1))
	switch {
	case err != nil:
		return "", fmt.Errorf("cannot read it (%w): give a readable file with one API token a line", err)
	case len(b) > apiTokenFileMaxBytes:
		return "", fmt.Errorf("the file is over %d KiB: give a file with one API token a line", apiTokenFileMaxBytes>>10)
	}
	return string(b), nil
}

// parseAPITokens appends the tokens of one source's entries, and where
// each was given, to tokens and from. Blank entries and lines starting
// with # are skipped; a source that holds no token is refused, since it
// was given to hold some.
func parseAPITokens(src apiTokenSource, entries []string, tokens []twiceweb.APIToken, from []string) ([]twiceweb.APIToken, []string, error) {
	n := len(tokens)
	for i, e := range entries {
		e = strings.Trim(e, " \t\r")
		if e == "" || strings.HasPrefix(e, "#") {
			continue
		}
		t, err := parseAPIToken(e)
		if err != nil {
			return nil, nil, usagef("%s, %s: %v", src.where, src.entry(i), err)
		}
		tokens, from = append(tokens, t), append(from, src.where+", "+src.entry(i))
	}
	if len(tokens) == n {
		return nil, nil, usagef("%s holds no API token: give one a line (TOKEN or NAME TOKEN; %s), or leave it out", src.where, apiTokenHint)
	}
	return tokens, from, nil
}

// parseAPIToken parses one entry, "TOKEN" or "NAME TOKEN". Its errors
// never quote the token.
func parseAPIToken(entry string) (twiceweb.APIToken, error) {
	words := strings.FieldsFunc(entry, func(r rune) bool { return r == ' ' || r == '\t' })
	var t twiceweb.APIToken
	switch len(words) {
	case 1:
		t.Token = words[0]
	case 2:
		t.Name, t.Token = words[0], words[1]
	default:
		return t, fmt.Errorf("%d words: give TOKEN or NAME TOKEN (a token holds no white space; %s)", len(words), apiTokenHint)
	}
	if t.Name != "" {
		if err := checkTokenText("the name", t.Name); err != nil {
			return t, err
		}
		if len(t.Name) > twice.MaxNameBytes {
			return t, fmt.Errorf("the name is %d bytes, over %d: shorten it", len(t.Name), twice.MaxNameBytes)
		}
		if t.Name == dashboardTokenName {
			return t, fmt.Errorf("the name %q is the one --token acts under: choose another", t.Name)
		}
	}
	if err := checkTokenText("the token", t.Token); err != nil {
		return t, fmt.Errorf("%w (%s)", err, apiTokenHint)
	}
	if len(t.Token) < twiceweb.APITokenMinBytes {
		return t, fmt.Errorf("the token is %d bytes, under %d: %s", len(t.Token), twiceweb.APITokenMinBytes, apiTokenHint)
	}
	if t.Name == "" {
		sum := sha256.Sum256([]byte(t.Token))
		t.Name = "token-" + hex.EncodeToString(sum[:4])
	}
	return t, nil
}

// checkTokenText refuses a name or token that is not printable ASCII,
// which an Authorization header carries as it is and a log shows plainly.
// The message names the character's code, never the text around it.
func checkTokenText(what, s string) error {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f {
			return fmt.Errorf("%s holds the byte 0x%02x at byte %d: use printable ASCII without white space", what, c, i)
		}
	}
	return nil
}
