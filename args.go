package twice

import (
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"time"
)

// Args is a job's payload: a small struct of primitive values (IDs, not
// entities) with a versioned kind name. Args are stored and shown as
// plaintext, so they must not carry secrets or personal data; fetch or
// regenerate those when the job runs.
type Args interface {
	// Kind names the job, versioned: "email.partner-verification.v1". A
	// change of payload shape is a new version, run side by side with the
	// old one until its jobs drain.
	Kind() string
}

// IdempotencyKeyer is implemented by Args that carry a natural idempotency
// key (an order id, say). Markers are claimed under it; without it the
// message id is the key, so only redeliveries of one message converge.
type IdempotencyKeyer interface {
	IdempotencyKey() string
}

// MaxArgsBytesDefault is the largest encoded payload Enqueue accepts.
const MaxArgsBytesDefault = 2 << 10

// kindPattern is <segment>(.<segment>)*.v<N>, lower case.
var kindPattern = regexp.MustCompile(`^[a-z][a-z0-9_-]*(\.[a-z][a-z0-9_-]*)*\.v[1-9][0-9]*$`)

// ValidateKind checks a kind name against the versioned naming rule.
func ValidateKind(kind string) error {
	if kindPattern.MatchString(kind) {
		return nil
	}
	switch {
	case kind == "":
		return fmt.Errorf("job kind is empty: name it like \"email.welcome.v1\"")
	case strings.ToLower(kind) != kind:
		return fmt.Errorf("job kind %q has upper-case letters: use %q", kind, strings.ToLower(kind))
	case !regexp.MustCompile(`\.v[0-9]+$`).MatchString(kind):
		return fmt.Errorf("job kind %q is not versioned: end it with .v1", kind)
	case strings.HasSuffix(kind, ".v0"):
		return fmt.Errorf("job kind %q has version 0: versions start at .v1", kind)
	}
	return fmt.Errorf("job kind %q is malformed: use dot-separated lower-case segments "+
		"(letters, digits, '-', '_', each starting with a letter) ending in a version, like \"email.welcome.v1\"", kind)
}

// Struct tag values under the "twice" key that relax or mark a field.
const (
	// TagAllow allows a field whose name looks like a secret or personal
	// data, for when it is neither (a token *count*, say).
	TagAllow = "allow"
	// TagSensitive allows such a field and marks it for redaction wherever
	// args are shown (CLI, dashboard).
	TagSensitive = "sensitive"
)

// sensitiveWords are substrings of field names that usually mean a secret or
// personal data. Matching is on the lower-cased field and JSON names with
// '_' and '-' removed.
var sensitiveWords = []string{
	"token", "password", "passwd", "secret", "apikey", "credential", "privatekey",
	"email", "phone", "card", "ssn", "iban", "cvv", "birthdate", "passport",
}

var payloadChecks sync.Map // reflect.Type -> error (nil when the type passed)

// checkPayloadType applies the payload policy to an Args type: a struct of
// primitive fields (and slices of them), none named like a secret unless
// tagged. The verdict is cached per type.
func checkPayloadType(t reflect.Type) error {
	if v, ok := payloadChecks.Load(t); ok {
		if v == nil {
			return nil
		}
		return v.(error)
	}
	err := checkPayloadTypeUncached(t)
	if err == nil {
		payloadChecks.Store(t, nil)
	} else {
		payloadChecks.Store(t, err)
	}
	return err
}

var timeType = reflect.TypeFor[time.Time]()

func checkPayloadTypeUncached(t reflect.Type) error {
	if t.Kind() != reflect.Struct {
		return fmt.Errorf("args type %s is a %s: args must be a struct of IDs and other primitive values", t, t.Kind())
	}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue // not encoded
		}
		jsonName, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if jsonName == "-" {
			continue
		}
		if err := checkFieldType(f.Type); err != nil {
			return fmt.Errorf("args type %s, field %s: %w", t, f.Name, err)
		}
		tag := f.Tag.Get("twice")
		if tag == TagAllow || tag == TagSensitive {
			continue
		}
		if word := sensitiveWord(f.Name, jsonName); word != "" {
			return fmt.Errorf("args type %s, field %s: the name looks like a secret or personal data (%q); "+
				"args are stored and shown as plaintext, so pass an ID and load or regenerate the value when the job runs, "+
				"or tag the field `twice:\"allow\"` (or `twice:\"sensitive\"` to redact it in the CLI and dashboard) if it is neither",
				t, f.Name, word)
		}
	}
	return nil
}

func checkFieldType(t reflect.Type) error {
	switch t.Kind() {
	case reflect.Bool, reflect.String,
		reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return nil
	case reflect.Slice, reflect.Array:
		if err := checkFieldType(t.Elem()); err != nil {
			return fmt.Errorf("element of %s: %w", t, err)
		}
		return nil
	case reflect.Struct:
		if t == timeType {
			return nil
		}
		return fmt.Errorf("nested struct %s is not allowed: args carry IDs only; pass the ID of the entity and load it when the job runs", t)
	case reflect.Map:
		return fmt.Errorf("map %s is not allowed: args are a fixed set of primitive fields; use named fields", t)
	case reflect.Pointer:
		return fmt.Errorf("pointer %s is not allowed: use the value type, with its zero value meaning absent", t)
	case reflect.Interface:
		return fmt.Errorf("interface %s is not allowed: args must have a concrete primitive type", t)
	case reflect.Func, reflect.Chan, reflect.UnsafePointer, reflect.Complex64, reflect.Complex128:
		return fmt.Errorf("%s cannot be encoded as a job argument: use a primitive value", t)
	}
	return fmt.Errorf("type %s is not allowed in args: use a primitive value", t)
}

func sensitiveWord(names ...string) string {
	for _, n := range names {
		n = strings.NewReplacer("_", "", "-", "").Replace(strings.ToLower(n))
		for _, w := range sensitiveWords {
			if strings.Contains(n, w) {
				return w
			}
		}
	}
	return ""
}

// SensitiveFields lists the JSON names of an args type's fields tagged
// `twice:"sensitive"`, for redaction where args are shown.
func SensitiveFields(t reflect.Type) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	var names []string
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Tag.Get("twice") != TagSensitive {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" {
			name = f.Name
		}
		names = append(names, name)
	}
	return names
}

// encodeArgs checks the kind and payload policy of args and encodes them,
// refusing an encoding larger than limit bytes.
func encodeArgs(args Args, limit int) ([]byte, error) {
	if args == nil {
		return nil, fmt.Errorf("args are nil: pass a struct value that implements twice.Args")
	}
	t := reflect.TypeOf(args)
	if err := ValidateKind(args.Kind()); err != nil {
		return nil, fmt.Errorf("args type %s: %w", t, err)
	}
	if err := checkPayloadType(t); err != nil {
		return nil, err
	}
	b, err := json.Marshal(args)
	if err != nil {
		return nil, fmt.Errorf("encode args of kind %q: %w", args.Kind(), err)
	}
	if len(b) > limit {
		return nil, fmt.Errorf("args of kind %q encode to %d bytes, over the %d-byte limit: "+
			"pass IDs and load the data when the job runs (or raise Config.MaxArgsBytes)", args.Kind(), len(b), limit)
	}
	return b, nil
}
