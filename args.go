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
	"unicode"
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

// Struct tag values under the "twice" key that relax or mark a field.
const (
	// TagAllow allows a field whose name looks like a secret or personal
	// data, for when it is neither (a token *count*, say).
	TagAllow = "allow"
	// TagSensitive allows such a field and marks it for redaction wherever
	// args are shown (CLI, dashboard).
	TagSensitive = "sensitive"
)

// sensitiveNames is the payload policy's table of names that mean a secret
// or personal data. Field names (Go and JSON) are split into lower-case
// words at case changes, digits and '_', '-', '.' or spaces (APIToken is
// "api token", user_name is "user name", JWTClaims is "jwt claims"), and a
// name is refused when its words contain an entry's words in a row, or one
// word spells the entry's words run together ("apikey", "username"). A
// word's plural counts as the word ("tokens").
//
// Matching words, not substrings, is what lets Cardinality, Wildcard,
// DiscardAfter and Pinned through while Card and PIN are refused. A name
// whose last word is an identifier or a measure (see qualifierWords:
// EmailID, PhoneCallID, TokenCount, PasswordLength) names data about the
// thing, not the thing, and is allowed, unless an entry ends at that last
// word itself (NationalID, TaxID are personal data).
//
// The list is deliberate: each entry is a secret (whoever reads it can act
// as someone) or personal data (it identifies or locates a person). A field
// it misses is still the user's responsibility; a field it wrongly refuses
// is tagged `twice:"allow"`.
var sensitiveNames = []sensitiveName{
	// Secrets.
	{"password", secretData, true},
	{"passwd", secretData, true},
	{"pwd", secretData, false},
	{"passphrase", secretData, true},
	{"secret", secretData, true},
	{"token", secretData, true},
	{"credential", secretData, true},
	{"api key", secretData, false},
	{"access key", secretData, false},
	{"private key", secretData, false},
	{"signing key", secretData, false},
	{"encryption key", secretData, false},
	{"session key", secretData, false},
	{"jwt", secretData, false},
	{"otp", secretData, false},
	{"totp", secretData, false},
	{"pin", secretData, false},
	{"cvv", secretData, false},
	{"cvc", secretData, false},
	{"bearer", secretData, false},
	{"cookie", secretData, false},
	{"authorization", secretData, false},
	{"auth header", secretData, false},
	// Personal data.
	{"email", personalData, false},
	{"e mail", personalData, false},
	{"mail address", personalData, false},
	{"phone", personalData, false},
	{"mobile number", personalData, false},
	{"msisdn", personalData, false},
	{"ssn", personalData, false},
	{"social security", personalData, false},
	{"national id", personalData, false},
	{"tax id", personalData, false},
	{"iban", personalData, false},
	{"card", personalData, false},
	{"passport", personalData, false},
	{"dob", personalData, false},
	{"birthdate", personalData, false},
	{"birth date", personalData, false},
	{"date of birth", personalData, false},
	{"birthday", personalData, false},
	{"full name", personalData, false},
	{"user name", personalData, false},
	{"first name", personalData, false},
	{"last name", personalData, false},
	{"given name", personalData, false},
	{"family name", personalData, false},
	{"middle name", personalData, false},
	{"maiden name", personalData, false},
	{"surname", personalData, false},
	{"home address", personalData, false},
	{"street address", personalData, false},
	{"postal address", personalData, false},
	{"mailing address", personalData, false},
	{"billing address", personalData, false},
	{"shipping address", personalData, false},
	{"ip", personalData, false},
	{"ip address", personalData, false},
	{"ip addr", personalData, false},
	{"mac address", personalData, false},
}

// qualifierWords end a name that holds an identifier or a measure of
// something rather than the thing: EmailID, TokenCount, PasswordLength.
var qualifierWords = map[string]bool{
	"id": true, "ids": true, "uuid": true, "guid": true,
	"count": true, "len": true, "length": true, "size": true,
	"type": true, "kind": true, "version": true,
}

const (
	secretData   = "a secret"
	personalData = "personal data"
)

// sensitiveName is one entry of sensitiveNames.
type sensitiveName struct {
	phrase string // words separated by one space
	what   string // secretData or personalData
	// suffix also matches the entry at the end of one longer word
	// ("resettoken", "clientsecret"): for words distinctive enough that no
	// harmless word ends in them.
	suffix bool
}

// sensitivePhrases are the entries of sensitiveNames split into words.
var sensitivePhrases = func() [][]string {
	p := make([][]string, len(sensitiveNames))
	for i, n := range sensitiveNames {
		p[i] = strings.Fields(n.phrase)
	}
	return p
}()

// sensitiveMatch is the entry a name matched.
type sensitiveMatch struct {
	phrase, what string
}

// sensitiveName reports the first of names that looks like a secret or
// personal data, and the entry it matched.
func sensitiveWord(names ...string) (sensitiveMatch, bool) {
	for _, n := range names {
		if m, ok := matchSensitive(nameWords(n)); ok {
			return m, true
		}
	}
	return sensitiveMatch{}, false
}

// matchSensitive applies the table to a name's words.
func matchSensitive(words []string) (sensitiveMatch, bool) {
	if len(words) == 0 {
		return sensitiveMatch{}, false
	}
	last := len(words) - 1
	qualified := last > 0 && qualifierWords[words[last]]
	for end := range words {
		if qualified && end != last {
			continue // the name is about the thing: only an entry ending in the qualifier counts
		}
		for i, p := range sensitivePhrases {
			if phraseEndsAt(words, end, p, sensitiveNames[i].suffix) {
				return sensitiveMatch{phrase: sensitiveNames[i].phrase, what: sensitiveNames[i].what}, true
			}
		}
	}
	return sensitiveMatch{}, false
}

// phraseEndsAt reports whether phrase p's words end at words[end], either
// one word each or run together in words[end] alone.
func phraseEndsAt(words []string, end int, p []string, suffix bool) bool {
	w := words[end]
	joined := strings.Join(p, "")
	if sameWord(w, joined) || (suffix && len(w) > len(joined) && (strings.HasSuffix(w, joined) || strings.HasSuffix(w, joined+"s"))) {
		return true
	}
	start := end - len(p) + 1
	if len(p) == 1 || start < 0 {
		return false
	}
	for j, pw := range p {
		if !sameWord(words[start+j], pw) {
			return false
		}
	}
	return true
}

// sameWord reports whether w is word or its plural.
func sameWord(w, word string) bool {
	return w == word || w == word+"s"
}

// nameWords splits a Go or JSON field name into lower-case words: at '_',
// '-', '.', spaces and other non-alphanumerics, between a lower-case letter
// and an upper-case one (userName), before the last capital of an acronym
// followed by a lower-case word (APIToken: api, token) unless that is a
// plural's s (UserIDs: user, ids), and between letters and digits.
func nameWords(name string) []string {
	runes := []rune(name)
	var words []string
	start := -1
	flush := func(end int) {
		if start >= 0 && end > start {
			words = append(words, strings.ToLower(string(runes[start:end])))
		}
		start = -1
	}
	for i, r := range runes {
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) {
			flush(i)
			continue
		}
		if start < 0 {
			start = i
			continue
		}
		prev := runes[i-1]
		var boundary bool
		switch {
		case unicode.IsDigit(r) != unicode.IsDigit(prev):
			boundary = true
		case unicode.IsUpper(r) && unicode.IsLower(prev):
			boundary = true
		case unicode.IsUpper(r) && unicode.IsUpper(prev) && i+1 < len(runes) && unicode.IsLower(runes[i+1]):
			plural := runes[i+1] == 's' && (i+2 == len(runes) || !unicode.IsLower(runes[i+2]))
			boundary = !plural
		}
		if boundary {
			flush(i)
			start = i
		}
	}
	flush(len(runes))
	return words
}

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
	s.customJSON = encodesItself(t)
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
		} else if m, ok := sensitiveWord(f.Name, jsonName); ok {
			s.err = fmt.Errorf("args type %s, field %s: the name contains %q, which looks like %s; "+
				"args are stored and shown as plaintext, so pass an ID and load or regenerate the value when the job runs, "+
				"or tag the field `twice:\"allow\"` (or `twice:\"sensitive\"` to redact it in the CLI and dashboard) if it is neither",
				t, f.Name, m.phrase, m.what)
			return s
		}
		s.customJSON = s.customJSON || fieldEncodesItself(f.Type)
		typ, items := jsonTypeOf(f.Type, slices.Contains(strings.Split(jsonOpts, ","), "string"))
		s.fields = append(s.fields, ArgField{Name: name, Type: typ, Items: items, Sensitive: tag == TagSensitive})
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

// jsonTypeOf is the JSON type encoding/json gives a field of type t:
// "string", "integer", "number", "boolean" or "array" (with items, the
// type of its elements), or "" when the type encodes itself. quoted is the
// json tag's ",string" option.
func jsonTypeOf(t reflect.Type, quoted bool) (typ, items string) {
	switch {
	case encodesItself(t):
		return "", ""
	case t == timeType, t.Implements(textMarshalerType):
		return "string", ""
	}
	switch t.Kind() {
	case reflect.String:
		return "string", ""
	case reflect.Bool:
		typ = "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		typ = "integer"
	case reflect.Float32, reflect.Float64:
		typ = "number"
	case reflect.Slice, reflect.Array:
		if t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8 && !encodesItself(t.Elem()) {
			return "string", "" // []byte is base64
		}
		items, _ = jsonTypeOf(t.Elem(), false)
		return "array", items
	}
	if quoted {
		return "string", ""
	}
	return typ, ""
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
// `twice:"sensitive"`, for redaction where args are shown.
func SensitiveFields(t reflect.Type) []string {
	var names []string
	for _, f := range ArgFields(t) {
		if f.Sensitive {
			names = append(names, f.Name)
		}
	}
	return names
}

// ArgFields describes the fields of an args type as they are stored: JSON
// name, JSON type and sensitive flag, for the kind catalog and for tools
// that check raw JSON args without the Go type (CheckArgsJSON). It returns
// nil for a type the payload policy refuses.
func ArgFields(t reflect.Type) []ArgField {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return nil
	}
	s := shapeOf(t)
	if s.err != nil {
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
