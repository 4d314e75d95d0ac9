package twicehttp

import (
	"errors"
	"strings"
)

// MaxKeyLength is the longest key accepted, in characters.
const MaxKeyLength = 255

// errKeyInvalid is the message a client gets for a key it must fix.
var errKeyInvalid = errors.New(`the Idempotency-Key header must be a structured-field string such as "8e03978e-40d5-43e8-bc93-6894a57f9324" (or the same characters unquoted), of 1 to 255 printable ASCII characters`)

// parseKey parses an Idempotency-Key field value. The draft makes it a
// structured-field string (RFC 8941 §3.3.3): printable ASCII in double
// quotes with \" and \\ escapes. Many clients send the bare value, so a bare
// token (RFC 9110 tchar plus ':' and '/', as an sf-token allows) is taken
// too; it is the same key as its quoted form.
func parseKey(v string) (string, error) {
	v = strings.Trim(v, " \t")
	if v == "" {
		return "", errKeyInvalid
	}
	var key string
	if v[0] == '"' {
		var b strings.Builder
		i := 1
		closed := false
		for ; i < len(v); i++ {
			c := v[i]
			switch {
			case c == '\\':
				i++
				if i == len(v) || (v[i] != '"' && v[i] != '\\') {
					return "", errKeyInvalid
				}
				b.WriteByte(v[i])
			case c == '"':
				closed = true
			case c < 0x20 || c > 0x7e:
				return "", errKeyInvalid
			default:
				b.WriteByte(c)
			}
			if closed {
				break
			}
		}
		// Nothing may follow the closing quote: parameters are not part
		// of the key and the draft defines none.
		if !closed || i != len(v)-1 {
			return "", errKeyInvalid
		}
		key = b.String()
	} else {
		for i := 0; i < len(v); i++ {
			if !isTokenChar(v[i]) {
				return "", errKeyInvalid
			}
		}
		key = v
	}
	if key == "" || len(key) > MaxKeyLength {
		return "", errKeyInvalid
	}
	return key, nil
}

// isTokenChar reports whether c may appear in a bare key.
func isTokenChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~:/", c) >= 0
}
