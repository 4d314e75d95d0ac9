package ops

import "encoding/json"

// RedactedMark replaces the value of a sensitive field.
const RedactedMark = "[redacted]"

// Redact replaces the named top-level fields of a JSON object and returns
// the names it replaced. Args that are not an object are returned as they
// are: nothing in them has a name.
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
	for _, f := range fields {
		if _, ok := obj[f]; ok {
			obj[f] = mark
			redacted = append(redacted, f)
		}
	}
	if len(redacted) == 0 {
		return json.RawMessage(raw), nil
	}
	b, err := json.Marshal(obj)
	if err != nil {
		return mark, redacted // never show what could not be redacted
	}
	return b, redacted
}
