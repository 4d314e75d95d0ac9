package ops

import (
	"encoding/json"
	"sort"
	"strings"
)

// RedactedMark replaces the value of a sensitive field.
const RedactedMark = "[redacted]"

// Redact replaces the named top-level fields of a JSON object and returns
// the keys it replaced, in order. Names match keys ignoring case, as
// encoding/json matches keys to fields: a job stored with "apitoken"
// decodes into the field APIToken, so it is that field's value and is
// redacted like it. Args that are not an object are returned as they are:
// nothing in them has a name.
func Redact(raw []byte, fields []string) (json.RawMessage, []string) {
	if len(fields) == 0 {
		return json.RawMessage(raw), nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return json.RawMessage(raw), nil
	}
	mark, _ := json.Marshal(RedactedMark)
	var redacted []string
	for key := range obj {
		for _, f := range fields {
			if strings.EqualFold(key, f) {
				obj[key] = mark
				redacted = append(redacted, key)
				break
			}
		}
	}
	if len(redacted) == 0 {
		return json.RawMessage(raw), nil
	}
	sort.Strings(redacted)
	b, err := json.Marshal(obj)
	if err != nil {
		return mark, redacted // never show what could not be redacted
	}
	return b, redacted
}
