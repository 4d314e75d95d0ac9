package twice

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/twicejobs/twice/twicetype"
)

// ArgField describes one field of a kind's args as stored in JSON (JSON
// name, JSON type, sensitive flag), for tools that check or show args
// without the Go type: the kind catalog, the CLI's enqueue (CheckArgsJSON)
// and redaction. It is the catalog's twicetype.ArgField; a field whose
// type encodes itself (MarshalJSON) has type twicetype.ArgTypeAny.
type ArgField = twicetype.ArgField

// CheckArgsJSON applies the payload policy to raw JSON args of kind, for
// tools that enqueue without the Go type: one JSON object of at most
// maxBytes once compacted (0 means MaxArgsBytesDefault) whose values are
// primitives or arrays of them. With fields (ArgFields, or the kind
// catalog's; empty for a kind without fields) every key must be one of
// them, with a value of its JSON type or null; with nil fields every key
// must pass the name rule Register applies to Go fields. Errors wrap
// ErrInvalidArgs.
func CheckArgsJSON(kind string, raw []byte, fields []ArgField, maxBytes int) error {
	if err := ValidateKind(kind); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidArgs, err)
	}
	if maxBytes == 0 {
		maxBytes = MaxArgsBytesDefault
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, raw); err != nil || !bytes.HasPrefix(compact.Bytes(), []byte("{")) {
		return fmt.Errorf("%w: args of kind %q are not a JSON object: pass one like '{\"user_id\": 42}'", ErrInvalidArgs, kind)
	}
	if compact.Len() > maxBytes {
		return fmt.Errorf("%w: args of kind %q are %d bytes, over the %d-byte limit: pass IDs, not data",
			ErrInvalidArgs, kind, compact.Len(), maxBytes)
	}
	members, err := objectMembers(compact.Bytes())
	if err != nil {
		return fmt.Errorf("%w: args of kind %q: %w", ErrInvalidArgs, kind, err)
	}
	for _, m := range members {
		if err := checkMember(m, fields); err != nil {
			return fmt.Errorf("%w: args of kind %q: %w", ErrInvalidArgs, kind, err)
		}
	}
	return nil
}

// checkMember checks one key and value of raw args against the kind's
// fields, or against the name rule when they are unknown (nil).
func checkMember(m member, fields []ArgField) error {
	if fields == nil {
		if err := checkPrimitive(m.value); err != nil {
			return fmt.Errorf("key %q has %w", m.key, err)
		}
		if sm, ok := matchSensitive(nameWords(m.key)); ok {
			return fmt.Errorf("key %q looks like %s (%q): args are stored and shown as plaintext, "+
				"so pass an ID and let the handler load or regenerate the value", m.key, sm.what, sm.phrase)
		}
		return nil
	}
	var f *ArgField
	var near []string
	for i := range fields {
		if fields[i].Name == m.key {
			f = &fields[i]
			break
		}
		if strings.EqualFold(fields[i].Name, m.key) {
			near = append(near, fields[i].Name)
		}
	}
	if f == nil {
		if len(near) > 0 {
			return fmt.Errorf("unknown field %q: did you mean %q?", m.key, near[0])
		}
		names := make([]string, len(fields))
		for i, f := range fields {
			names[i] = f.Name
		}
		if len(names) == 0 {
			return fmt.Errorf("unknown field %q: the kind has no fields; pass {}", m.key)
		}
		return fmt.Errorf("unknown field %q: the kind's fields are %s", m.key, strings.Join(names, ", "))
	}
	if got, ok := jsonValueFits(m.value, f.Type); !ok {
		return fmt.Errorf("field %q is %s, want %s", m.key, got, cmp.Or(f.Type, twicetype.ArgTypeAny))
	}
	return nil
}

// jsonValueFits reports whether a JSON value has the JSON type typ (null
// fits any; ArgTypeAny, or no type, takes any primitive; an array's
// elements must be primitives), and what it is.
func jsonValueFits(v json.RawMessage, typ string) (got string, ok bool) {
	got = jsonTypeOfValue(v)
	switch {
	case got == "null":
		return got, true
	case typ == twicetype.ArgTypeAny, typ == "":
		return got, checkPrimitive(v) == nil
	case typ == twicetype.ArgTypeNumber && got == twicetype.ArgTypeInteger:
		return got, true
	case got != typ:
		return got, false
	case typ == twicetype.ArgTypeArray && checkPrimitive(v) != nil:
		return "an array holding an object", false
	}
	return got, true
}

// jsonTypeOfValue names the JSON type of a valid, compact JSON value, as
// ArgField.Type does; a number without fraction or exponent is "integer".
func jsonTypeOfValue(v json.RawMessage) string {
	if len(v) == 0 {
		return "nothing"
	}
	switch v[0] {
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	case '[':
		return "array"
	case '{':
		return "object"
	}
	if bytes.ContainsAny(v, ".eE") {
		return "number"
	}
	return "integer"
}

// checkPrimitive refuses a JSON value that is an object or holds one: args
// carry IDs and other primitive values, not entities.
func checkPrimitive(v json.RawMessage) error {
	switch jsonTypeOfValue(v) {
	case "object":
		return errors.New("an object: args carry IDs and other primitive values; pass the ID of the entity instead")
	case "array":
		var elems []json.RawMessage
		if err := json.Unmarshal(v, &elems); err != nil {
			return fmt.Errorf("a malformed array: %w", err)
		}
		for _, e := range elems {
			if err := checkPrimitive(e); err != nil {
				return err
			}
		}
	}
	return nil
}

// member is one key and value of a JSON object.
type member struct {
	key   string
	value json.RawMessage
}

// objectMembers lists the members of a JSON object in order, refusing
// anything else and a key given twice (encoding/json would keep the last,
// so what a tool checked and what a handler got could differ).
func objectMembers(b []byte) ([]member, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("not a JSON object")
	}
	var members []member
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := tok.(string)
		if seen[key] {
			return nil, fmt.Errorf("key %q is given twice: give each field once", key)
		}
		seen[key] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		members = append(members, member{key: key, value: v})
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("unexpected data after the JSON object")
	}
	return members, nil
}

// strictUnmarshal decodes one JSON value into v, refusing a key v does not
// declare (the error names it) and anything after the value. A handler
// decodes its args this way: an extra key is either a producer's mistake or
// a field smuggled past the payload policy, and dropping it silently would
// hide both.
//
// It runs once per job, so its decoder comes from a pool: a json.Decoder
// costs a kilobyte of allocations to build (its buffer, decode state and
// scanner), which was most of what a no-op job allocated and a tenth of a
// PostgreSQL burn-down's CPU in GC and stack growth (issue 15).
func strictUnmarshal(raw []byte, v any) error {
	d := strictDecoders.Get().(*strictDecoder)
	d.src.Reset(raw)
	err := d.dec.Decode(v)
	if err == nil && d.dec.More() {
		err = errors.New("unexpected data after the JSON object")
	}
	// A decoder that failed may keep its error or a part of the value in its
	// buffer, and a large one keeps its buffer: neither goes back.
	if err == nil && len(raw) <= strictDecoderMaxBytes {
		strictDecoders.Put(d)
	}
	return err
}

// strictDecoderMaxBytes bounds the args whose decoder goes back to the pool,
// so one large job does not pin a large buffer.
const strictDecoderMaxBytes = 64 << 10

// strictDecoder is a reusable strict json.Decoder over src. After a value
// and its end (Decode, then More at the end of src), the decoder's buffer is
// consumed and its error unset, so it reads the next src as a fresh one.
type strictDecoder struct {
	src bytes.Reader
	dec *json.Decoder
}

var strictDecoders = sync.Pool{New: func() any {
	d := &strictDecoder{}
	d.dec = json.NewDecoder(&d.src)
	d.dec.DisallowUnknownFields()
	return d
}}
