package twice

import (
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twicejobs/twice/twicetype"
)

// Args is a job's payload: a small struct of primitive values (IDs, not
// entities) with a versioned kind name. Args are stored and shown as
// plaintext, so they must not carry secrets or personal data; fetch or
// regenerate those when the job runs.
//
// Register and Enqueue apply this payload policy to the type: its fields
// are primitives, time.Time or slices of them (no nested structs, maps,
// pointers, interfaces), and no field is named like a secret or personal
// data. Names are split into words (APIToken is "api token", user_name
// "user name"), and a name is refused when it holds a secret word (password,
// pwd, secret, token, credential, api key, access key, private key, jwt,
// otp, pin, cvv, bearer, cookie, authorization, auth header) or a personal
// one (email, phone, ssn, iban, card, passport, dob, date of birth, full
// name, user name, first/last name, surname, home/street/billing address,
// ip, ip address, national id, tax id), so Cardinality and Wildcard pass
// while Card is refused. A name ending in an identifier or a measure (id,
// ids, uuid, count, length, size, type, kind, version) is about the thing,
// not the thing, and passes: EmailID, TokenCount. Tag a field
// `twice:"allow"` when the rule misjudges it, or `twice:"sensitive"` to
// keep it and have it redacted where args are shown. A type with its own
// MarshalJSON has its encoding checked too, and a handler decodes its
// args strictly: a field the type does not declare is a permanent error.
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

// Struct tag values under the "twice" key that relax or mark a field.
const (
	// TagAllow allows a field whose name looks like a secret or personal
	// data, for when it is neither (a token *count*, say).
	TagAllow = "allow"
	// TagSensitive allows such a field and marks it for redaction wherever
	// args are shown (CLI, dashboard).
	TagSensitive = "sensitive"
)

// argsShape is what the payload policy learnt about an Args type, cached
// per type: its verdict, and its fields as they are stored.
type argsShape struct {
	err    error
	fields []ArgField
	// byName holds the declared fields by JSON name; allowed the JSON
	// names tagged allow or sensitive, exempt from the name rule.
	byName  map[string]*ArgField
	allowed map[string]bool
	// customJSON reports that the type or one of its fields' types encodes
	// itself (MarshalJSON): the encoding can then hold keys and values the
	// fields do not declare, so each one is checked at enqueue.
	customJSON bool
	// selfEncoding reports that the type itself encodes itself: its
	// fields then do not describe its JSON, so ArgFields cannot either.
	selfEncoding bool
	// customDecode reports that the type decodes itself (UnmarshalJSON),
	// so the strict decode cannot refuse keys it does not declare.
	customDecode bool
}

var argsShapes sync.Map // reflect.Type -> *argsShape

var (
	timeType          = reflect.TypeFor[time.Time]()
	jsonMarshalerType = reflect.TypeFor[json.Marshaler]()
	jsonDecoderType   = reflect.TypeFor[json.Unmarshaler]()
	textMarshalerType = reflect.TypeFor[encoding.TextMarshaler]()
)

// shapeOf applies the payload policy to an Args type, once per type.
func shapeOf(t reflect.Type) *argsShape {
	if v, ok := argsShapes.Load(t); ok {
		return v.(*argsShape)
	}
	s := newArgsShape(t)
	v, _ := argsShapes.LoadOrStore(t, s)
	return v.(*argsShape)
}

// checkPayloadType applies the payload policy to an Args type: a struct of
// primitive fields (and slices of them), none named like a secret or
// personal data unless tagged.
func checkPayloadType(t reflect.Type) error {
	return shapeOf(t).err
}

func newArgsShape(t reflect.Type) *argsShape {
	s := &argsShape{byName: map[string]*ArgField{}, allowed: map[string]bool{}}
	if t.Kind() != reflect.Struct {
		s.err = fmt.Errorf("args type %s is a %s: args must be a struct of IDs and other primitive values", t, t.Kind())
		return s
	}
	// A struct with MarshalText encodes as a JSON string: not an object of
	// fields either, so its encoding is checked like a MarshalJSON one's.
	s.selfEncoding = encodesItself(t) || t.Implements(textMarshalerType) || reflect.PointerTo(t).Implements(textMarshalerType)
	s.customJSON = s.selfEncoding
	s.customDecode = t.Implements(jsonDecoderType) || reflect.PointerTo(t).Implements(jsonDecoderType)
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue // not encoded
		}
		jsonName, jsonOpts, hasOpts := strings.Cut(f.Tag.Get("json"), ",")
		if jsonName == "-" && !hasOpts {
			continue
		}
		if err := checkFieldType(f.Type); err != nil {
			s.err = fmt.Errorf("args type %s, field %s: %w", t, f.Name, err)
			return s
		}
		name := jsonName
		if name == "" {
			name = f.Name
		}
		tag := f.Tag.Get("twice")
		if tag == TagAllow || tag == TagSensitive {
			s.allowed[name] = true
		} else if m, ok := sensitiveFieldName(f.Name, jsonName); ok {
			s.err = fmt.Errorf("args type %s, field %s: the name contains %q, which looks like %s; "+
				"args are stored and shown as plaintext, so pass an ID and load or regenerate the value when the job runs, "+
				"or tag the field `twice:\"allow\"` (or `twice:\"sensitive\"` to redact it in the CLI and dashboard) if it is neither",
				t, f.Name, m.phrase, m.what)
			return s
		}
		s.customJSON = s.customJSON || fieldEncodesItself(f.Type)
		typ := jsonTypeOf(f.Type, slices.Contains(strings.Split(jsonOpts, ","), "string"))
		s.fields = append(s.fields, ArgField{Name: name, Type: typ, Sensitive: tag == TagSensitive})
	}
	if s.fields == nil {
		s.fields = []ArgField{} // known to have no fields, unlike nil
	}
	for i := range s.fields {
		s.byName[s.fields[i].Name] = &s.fields[i]
	}
	return s
}

// encodesItself reports whether t has its own JSON encoding.
func encodesItself(t reflect.Type) bool {
	return t != timeType && (t.Implements(jsonMarshalerType) || reflect.PointerTo(t).Implements(jsonMarshalerType))
}

// fieldEncodesItself reports whether a field of type t, or its elements,
// may encode as anything at all.
func fieldEncodesItself(t reflect.Type) bool {
	if encodesItself(t) {
		return true
	}
	if t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
		return fieldEncodesItself(t.Elem())
	}
	return false
}

// jsonTypeOf is the JSON type encoding/json gives a field of type t, one
// of the twicetype.ArgType constants: ArgTypeAny when the type encodes
// itself. quoted is the json tag's ",string" option.
func jsonTypeOf(t reflect.Type, quoted bool) string {
	switch {
	case encodesItself(t):
		return twicetype.ArgTypeAny
	case t == timeType, t.Implements(textMarshalerType):
		return twicetype.ArgTypeString
	}
	var typ string
	switch t.Kind() {
	case reflect.String:
		return twicetype.ArgTypeString
	case reflect.Bool:
		typ = twicetype.ArgTypeBoolean
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		typ = twicetype.ArgTypeInteger
	case reflect.Float32, reflect.Float64:
		typ = twicetype.ArgTypeNumber
	case reflect.Slice, reflect.Array:
		if t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8 && !encodesItself(t.Elem()) {
			return twicetype.ArgTypeString // []byte is base64
		}
		return twicetype.ArgTypeArray
	}
	if quoted {
		return twicetype.ArgTypeString
	}
	return typ
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

// SensitiveFields lists the JSON names of an args type's fields tagged
// `twice:"sensitive"`, for redaction where args are shown. For a type that
// encodes itself they are the names its fields would have: the best guess
// there is.
func SensitiveFields(t reflect.Type) []string {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return nil
	}
	var names []string
	for _, f := range shapeOf(t).fields {
		if f.Sensitive {
			names = append(names, f.Name)
		}
	}
	return names
}

// ArgFields describes the fields of an args type as they are stored: JSON
// name, JSON type and sensitive flag, for the kind catalog and for tools
// that check raw JSON args without the Go type (CheckArgsJSON). It returns
// nil, meaning unknown, for a type the payload policy refuses and for one
// that encodes itself (MarshalJSON or MarshalText on the args type): its
// Go fields need not be its JSON keys.
func ArgFields(t reflect.Type) []ArgField {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return nil
	}
	s := shapeOf(t)
	if s.err != nil || s.selfEncoding {
		return nil
	}
	return slices.Clone(s.fields)
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
	shape := shapeOf(t)
	if shape.err != nil {
		return nil, shape.err
	}
	b, err := json.Marshal(args)
	if err != nil {
		return nil, fmt.Errorf("encode args of kind %q: %w", args.Kind(), err)
	}
	if len(b) > limit {
		return nil, fmt.Errorf("args of kind %q encode to %d bytes, over the %d-byte limit: "+
			"pass IDs and load the data when the job runs (or raise Config.MaxArgsBytes)", args.Kind(), len(b), limit)
	}
	if shape.customJSON {
		if err := shape.checkEncoded(b); err != nil {
			return nil, fmt.Errorf("args type %s: its JSON encoding %w", t, err)
		}
	}
	return b, nil
}

// checkEncoded applies the payload policy to what a type that encodes
// itself produced: the type was checked, but MarshalJSON can add any key
// and any value. Every key must be a declared field or, for a type that
// also decodes itself, a name the policy allows; every value a primitive
// or an array of them.
func (s *argsShape) checkEncoded(b []byte) error {
	members, err := objectMembers(b)
	if err != nil {
		return fmt.Errorf("is not a JSON object of fields: %w", err)
	}
	for _, m := range members {
		if err := checkPrimitive(m.value); err != nil {
			return fmt.Errorf("has key %q with %w", m.key, err)
		}
		if _, ok := s.declared(m.key); ok {
			continue
		}
		if !s.customDecode {
			return fmt.Errorf("has key %q that the type does not declare: the handler's strict decode would refuse the job; "+
				"encode only the struct's fields", m.key)
		}
		if sm, ok := matchSensitive(nameWords(m.key)); ok {
			return fmt.Errorf("has key %q, which looks like %s (%q): args are stored and shown as plaintext; pass an ID instead",
				m.key, sm.what, sm.phrase)
		}
	}
	return nil
}

// declared finds the field a JSON key decodes into, matching as
// encoding/json does: exactly, else ignoring case.
func (s *argsShape) declared(key string) (*ArgField, bool) {
	if f, ok := s.byName[key]; ok {
		return f, true
	}
	for i := range s.fields {
		if strings.EqualFold(s.fields[i].Name, key) {
			return &s.fields[i], true
		}
	}
	return nil, false
}
