package twice

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestValidateKind(t *testing.T) {
	t.Parallel()
	tests := []struct {
		kind    string
		wantErr string // substring; empty means valid
	}{
		{"email.partner-verification.v1", ""},
		{"pdf.cv.v12", ""},
		{"a_b.c-d.v3", ""},
		{"", "empty"},
		{"Email.welcome.v1", "upper-case"},
		{"email.welcome", "not versioned: end it with .v1"},
		{"email.welcome.v0", "version 0"},
		{"email..welcome.v1", "malformed"},
		{".v1", "malformed"},
		{"email.1welcome.v1", "malformed"},
		{"email welcome.v1", "malformed"},
		{"email\x00.welcome.v1", `job kind "email\x00.welcome.v1" contains a NUL byte`},
		{"email.\xffwelcome.v1", `job kind "email.\xffwelcome.v1" is not valid UTF-8`},
		{"a." + strings.Repeat("b", MaxKindBytes) + ".v1", "over the 255-byte limit"},
		{strings.Repeat("a", MaxKindBytes-3) + ".v1", ""},
	}
	for _, tt := range tests {
		err := ValidateKind(tt.kind)
		if err != nil && len(err.Error()) > 300 {
			t.Errorf("ValidateKind(%.20q): the error is %d bytes: quote the kind cut short", tt.kind, len(err.Error()))
		}
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("ValidateKind(%q) = %v, want nil", tt.kind, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("ValidateKind(%q) = %v, want error containing %q", tt.kind, err, tt.wantErr)
		}
	}
}

type okArgs struct {
	UserID    int64
	Country   string
	IDs       []int64
	When      time.Time
	TokenHint string         `twice:"allow"`
	Nickname  string         `twice:"sensitive" json:"nick"`
	_         map[string]int // unexported fields are not encoded
	Skipped   any            `json:"-"`
}

func (okArgs) Kind() string { return "test.ok.v1" }

type nestedArgs struct{ User struct{ ID int } }
type mapArgs struct{ Meta map[string]string }
type ptrArgs struct{ UserID *int64 }
type ifaceArgs struct{ Any any }
type funcArgs struct{ F func() }
type secretArgs struct{ ResetToken string }
type jsonNameSecretArgs struct {
	Contact string `json:"email_address"`
}
type sliceOfStructArgs struct{ Items []struct{ A int } }

func TestCheckPayloadType(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		typ     reflect.Type
		wantErr []string // substrings, all required; nil means valid
	}{
		{"primitives, slices, time and tagged fields", reflect.TypeFor[okArgs](), nil},
		{"nested struct", reflect.TypeFor[nestedArgs](), []string{"nestedArgs", "field User", "nested struct", "pass the ID"}},
		{"map", reflect.TypeFor[mapArgs](), []string{"field Meta", "map"}},
		{"pointer", reflect.TypeFor[ptrArgs](), []string{"field UserID", "pointer"}},
		{"interface", reflect.TypeFor[ifaceArgs](), []string{"field Any", "interface"}},
		{"func", reflect.TypeFor[funcArgs](), []string{"field F", "cannot be encoded"}},
		{"secret-looking name", reflect.TypeFor[secretArgs](), []string{"field ResetToken", `"token"`, `twice:"allow"`}},
		{"secret-looking JSON name", reflect.TypeFor[jsonNameSecretArgs](), []string{"field Contact", `"email"`}},
		{"slice of struct", reflect.TypeFor[sliceOfStructArgs](), []string{"field Items", "element", "nested struct"}},
		{"not a struct", reflect.TypeFor[string](), []string{"must be a struct"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkPayloadType(tt.typ)
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error; want one containing %q", tt.wantErr)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

type bigArgs struct{ Blob string }

func (bigArgs) Kind() string { return "test.big.v1" }

func TestEncodeArgsSizeLimit(t *testing.T) {
	t.Parallel()
	if _, err := encodeArgs(bigArgs{Blob: strings.Repeat("x", 100)}, 2048); err != nil {
		t.Fatalf("small args refused: %v", err)
	}
	_, err := encodeArgs(bigArgs{Blob: strings.Repeat("x", 3000)}, 2048)
	if err == nil || !strings.Contains(err.Error(), "over the 2048-byte limit") || !strings.Contains(err.Error(), "pass IDs") {
		t.Fatalf("oversized args: err = %v, want size-limit error", err)
	}
}

func TestSensitiveFields(t *testing.T) {
	t.Parallel()
	got := SensitiveFields(reflect.TypeFor[okArgs]())
	if len(got) != 1 || got[0] != "nick" {
		t.Fatalf("SensitiveFields = %v, want [nick]", got)
	}
}

func TestNameWords(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		want []string
	}{
		{"UserID", []string{"user", "id"}},
		{"userId", []string{"user", "id"}},
		{"user_id", []string{"user", "id"}},
		{"user-id", []string{"user", "id"}},
		{"APIToken", []string{"api", "token"}},
		{"JWTClaims", []string{"jwt", "claims"}},
		{"IPAddress", []string{"ip", "address"}},
		{"UserIDs", []string{"user", "ids"}},
		{"HTTPServer2Port", []string{"http", "server", "2", "port"}},
		{"email.address", []string{"email", "address"}},
		{"DOB", []string{"dob"}},
		{"", nil},
	}
	for _, tt := range tests {
		if got := nameWords(tt.name); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("nameWords(%q) = %q, want %q", tt.name, got, tt.want)
		}
	}
}

// TestSensitiveNames is the payload policy's name rule in both directions:
// the names of issue 12 item 5 that a substring match refused wrongly, and
// the ones it missed.
func TestSensitiveNames(t *testing.T) {
	t.Parallel()
	refused := map[string]string{ // name -> the entry it matches
		// Secrets.
		"Password": "password", "ResetToken": "token", "reset_token": "token", "resettoken": "token",
		"Tokens": "token", "Pwd": "pwd", "user_pwd": "pwd", "ClientSecret": "secret", "clientsecret": "secret",
		"Credentials": "credential", "JWT": "jwt", "JWTClaims": "jwt", "jwt_claims": "jwt", "OTP": "otp", "OTPCode": "otp",
		"PIN": "pin", "pin": "pin", "Pins": "pin", "AccessKey": "access key", "accesskey": "access key",
		"APIKey": "api key", "api_key": "api key", "apikey": "api key", "APIToken": "token",
		"SessionCookie": "cookie", "AuthHeader": "auth header", "auth-header": "auth header",
		"Authorization": "authorization", "Bearer": "bearer", "BearerValue": "bearer", "CVV": "cvv",
		// Personal data.
		"Email": "email", "email_address": "email", "EmailAddress": "email", "e-mail": "e mail", "Phone": "phone",
		"PhoneNumber": "phone", "Card": "card", "CardNumber": "card", "SSN": "ssn", "IBAN": "iban",
		"FullName": "full name", "full_name": "full name", "fullname": "full name", "HomeAddress": "home address",
		"DOB": "dob", "DateOfBirth": "date of birth", "date_of_birth": "date of birth", "BirthDate": "birth date",
		"UserName": "user name", "username": "user name", "user_name": "user name",
		"IPAddress": "ip", "ip_address": "ip", "ipaddress": "ip address", "ClientIP": "ip",
		"FirstName": "first name", "Surname": "surname", "Passport": "passport", "NationalID": "national id",
		"TaxID": "tax id",
	}
	allowed := []string{
		// Identifiers and measures of a sensitive thing, not the thing.
		"EmailID", "email_id", "emailId", "CardID", "PhoneCallID", "TokenCount", "token_count", "PasswordLength",
		"EmailIDs", "TokenCounts", "AccessKeyID", "SessionID", "UserID", "PasswordResetID", "CardType",
		// Words that merely contain a sensitive one.
		"DiscardAfter", "Wildcard", "Cardinality", "Pinned", "Spinner", "Shipping", "Zipped", "Tipping",
		"Domain", "Recipe", "Opinion", "Keyword",
		// Ordinary fields.
		"Country", "Amount", "Cents", "OrderID", "Name", "Address", "Key", "Session", "Count", "ID", "",
	}
	for name, want := range refused {
		m, ok := sensitiveFieldName(name)
		if !ok || m.phrase != want {
			t.Errorf("%q: matched %q (%v), want refused for %q", name, m.phrase, ok, want)
		}
	}
	for _, name := range allowed {
		if m, ok := sensitiveFieldName(name); ok {
			t.Errorf("%q: refused for %q, want allowed", name, m.phrase)
		}
	}
}

// sneakyArgs declares an ID but encodes a password as well: the type
// passes the name rule, its encoding must not.
type sneakyArgs struct{ UserID int64 }

func (sneakyArgs) Kind() string { return "test.sneaky.v1" }
func (a sneakyArgs) MarshalJSON() ([]byte, error) {
	return json.Marshal(map[string]any{"UserID": a.UserID, "password": "hunter2"})
}

// renamedArgs encodes and decodes itself under other names: keys it does
// not declare are then judged by the name rule alone.
type renamedArgs struct{ UserID int64 }

func (renamedArgs) Kind() string { return "test.renamed.v1" }
func (a renamedArgs) MarshalJSON() ([]byte, error) {
	return json.Marshal(map[string]any{"uid": a.UserID})
}
func (a *renamedArgs) UnmarshalJSON(b []byte) error {
	var v struct{ UID int64 }
	err := json.Unmarshal(b, &v)
	a.UserID = v.UID
	return err
}

// leakyField is a field type whose encoding is an object.
type leakyField int64

func (f leakyField) MarshalJSON() ([]byte, error) {
	return json.Marshal(map[string]any{"id": int64(f), "email": "a@example.com"})
}

// textArgs encodes as a JSON string through MarshalText.
type textArgs struct{ ID int64 }

func (textArgs) Kind() string                   { return "test.text.v1" }
func (a textArgs) MarshalText() ([]byte, error) { return []byte("id-1"), nil }

type leakyFieldArgs struct{ User leakyField }

func (leakyFieldArgs) Kind() string { return "test.leaky-field.v1" }

// TestEncodedOutputIsChecked: a type with its own MarshalJSON can add any
// field (issue 12 item 5e), so what it encodes is checked at enqueue.
func TestEncodedOutputIsChecked(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		args    Args
		wantErr string // empty: accepted
	}{
		{"a key the type does not declare", sneakyArgs{UserID: 1}, `key "password" that the type does not declare`},
		{"a renamed key of a type that decodes itself", renamedArgs{UserID: 1}, ""},
		{"a field that encodes as an object", leakyFieldArgs{User: 1}, `key "User" with an object`},
		{"a type that encodes as text", textArgs{ID: 1}, "is not a JSON object of fields"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := encodeArgs(tt.args, MaxArgsBytesDefault)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
			}
		})
	}
	// A key named like a secret is refused even from a type that decodes
	// itself.
	shape := shapeOf(reflect.TypeFor[renamedArgs]())
	if err := shape.checkEncoded([]byte(`{"uid":1,"api_key":"k"}`)); err == nil || !strings.Contains(err.Error(), `"api key"`) {
		t.Errorf("checkEncoded with api_key: err = %v, want the name rule", err)
	}
}

// TestRegisterChecksTheZeroValuesEncoding: the encoding check runs at
// registration too, on the zero value.
func TestRegisterChecksTheZeroValuesEncoding(t *testing.T) {
	t.Parallel()
	err := Register(NewRegistry(), HandlerFunc[sneakyArgs](func(context.Context, *Job[sneakyArgs]) error { return nil }), nil)
	if err == nil || !strings.Contains(err.Error(), `key "password"`) {
		t.Fatalf("Register = %v, want the encoding refused", err)
	}
	if err := Register(NewRegistry(), HandlerFunc[renamedArgs](func(context.Context, *Job[renamedArgs]) error { return nil }), nil); err != nil {
		t.Fatalf("Register of a type that renames its fields: %v", err)
	}
}

type shapeArgs struct {
	UserID  int64
	Country string `json:"country"`
	Score   float64
	Tags    []string
	IDs     []int64 `json:"ids"`
	Blob    []byte
	When    time.Time
	Quoted  int64 `json:",string"`
	Flag    bool
	Nick    string `json:"nick" twice:"sensitive"`
	Skipped string `json:"-"`
}

func (shapeArgs) Kind() string { return "test.shape.v1" }

func TestArgFields(t *testing.T) {
	t.Parallel()
	want := []ArgField{
		{Name: "UserID", Type: "integer"},
		{Name: "country", Type: "string"},
		{Name: "Score", Type: "number"},
		{Name: "Tags", Type: "array"},
		{Name: "ids", Type: "array"},
		{Name: "Blob", Type: "string"},
		{Name: "When", Type: "string"},
		{Name: "Quoted", Type: "string"},
		{Name: "Flag", Type: "boolean"},
		{Name: "nick", Type: "string", Sensitive: true},
	}
	if got := ArgFields(reflect.TypeFor[shapeArgs]()); !reflect.DeepEqual(got, want) {
		t.Errorf("ArgFields =\n%+v\nwant\n%+v", got, want)
	}
	if got := ArgFields(reflect.TypeFor[struct{}]()); got == nil || len(got) != 0 {
		t.Errorf("ArgFields of an empty struct = %#v, want an empty, non-nil list", got)
	}
	if got := ArgFields(reflect.TypeFor[secretArgs]()); got != nil {
		t.Errorf("ArgFields of a refused type = %v, want nil", got)
	}
}

// TestCheckArgsJSON: raw JSON args get the payload policy that Go types
// get (issue 12 item 5c).
func TestCheckArgsJSON(t *testing.T) {
	t.Parallel()
	fields := ArgFields(reflect.TypeFor[shapeArgs]())
	const kind = "test.shape.v1"
	tests := []struct {
		name    string
		raw     string
		fields  []ArgField
		wantErr string // empty: accepted
	}{
		// The kind's fields unknown: the name rule on keys.
		{"secret and personal data keys", `{"password":"x","email":"a@example.com"}`, nil, `key "password" looks like a secret`},
		{"personal data key", `{"user_id":1,"email":"a@example.com"}`, nil, `key "email" looks like personal data`},
		{"camelCase secret key", `{"apiToken":"x"}`, nil, `("token")`},
		{"ID keys", `{"email_id":1,"cardId":2,"token_count":3}`, nil, ""},
		{"nested object", `{"user":{"id":1}}`, nil, `key "user" has an object`},
		{"array of objects", `{"users":[{"id":1}]}`, nil, "an object"},
		{"not an object", `[1]`, nil, "not a JSON object"},
		{"malformed", `{"a":`, nil, "not a JSON object"},
		{"over the limit", `{"blob":"` + strings.Repeat("x", MaxArgsBytesDefault) + `"}`, nil, "over the 2048-byte limit"},
		{"a key given twice", `{"n":1,"n":2}`, nil, `key "n" is given twice`},
		{"bad kind", `{}`, nil, "not versioned"},
		// The kind's fields known.
		{"fields and types", `{"UserID":1,"country":"NL","Score":1,"Tags":["a"],"ids":[1,2],"When":"2026-01-02T03:04:05Z",` +
			`"Quoted":"5","Flag":true,"nick":"n","Blob":null}`, fields, ""},
		{"unknown field", `{"UserID":1,"password":"x"}`, fields, `unknown field "password": the kind's fields are UserID, country`},
		{"field in another case", `{"userid":1}`, fields, `unknown field "userid": did you mean "UserID"?`},
		{"wrong type", `{"UserID":"1"}`, fields, `field "UserID" is string, want integer`},
		{"fraction for an integer", `{"UserID":1.5}`, fields, `field "UserID" is number, want integer`},
		{"an object in an array", `{"ids":[{"id":1}]}`, fields, `field "ids" is an array holding an object, want array`},
		{"any primitive for a field that encodes itself", `{"x":"a"}`, []ArgField{{Name: "x", Type: "any"}}, ""},
		{"no object for a field that encodes itself", `{"x":{}}`, []ArgField{{Name: "x", Type: "any"}}, `field "x" is object, want any`},
		{"no type is any type", `{"x":1}`, []ArgField{{Name: "x"}}, ""},
		{"no fields", `{"a":1}`, []ArgField{}, "the kind has no fields"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := kind
			if tt.name == "bad kind" {
				k = "test.shape"
			}
			err := CheckArgsJSON(k, []byte(tt.raw), tt.fields, 0)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
			case err != nil && !errors.Is(err, ErrInvalidArgs):
				t.Fatalf("err = %v does not wrap ErrInvalidArgs", err)
			}
		})
	}
}

func TestValidateQueueAndKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		queue   string
		wantErr string // empty: valid
	}{
		{"default", ""},
		{"emails.bulk", ""},
		{"tenant-42", ""},
		{"0_first", ""},
		{strings.Repeat("q", MaxQueueBytes), ""},
		{"", "empty"},
		{strings.Repeat("q", MaxQueueBytes+1), "over the 128-byte limit"},
		{"Emails", `use "emails"`},
		{"<script>", "malformed"},
		{"a b", "malformed"},
		{"-a", "malformed"},
		{".a", "malformed"},
		{"a\x00", "NUL"},
		{"a\xff", "not valid UTF-8"},
		{"é", "malformed"},
	}
	for _, tt := range tests {
		err := ValidateQueue(tt.queue)
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("ValidateQueue(%.20q) = %v, want nil", tt.queue, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("ValidateQueue(%.20q) = %v, want error containing %q", tt.queue, err, tt.wantErr)
		}
	}
	if err := ValidateKey("unique key", strings.Repeat("k", MaxKeyBytes)); err != nil {
		t.Errorf("key at the limit: %v", err)
	}
	if err := ValidateKey("unique key", ""); err != nil {
		t.Errorf("empty key (none): %v", err)
	}
	err := ValidateKey("unique key", strings.Repeat("k", 100<<10))
	if err == nil || !strings.Contains(err.Error(), "unique key \"kkkk") || !strings.Contains(err.Error(), "is 102400 bytes, over the 512-byte limit") {
		t.Errorf("100 KB key: %v", err)
	}
}

func TestRegistryArgFields(t *testing.T) {
	t.Parallel()
	reg := NewRegistry()
	MustRegister(reg, HandlerFunc[okArgs](func(context.Context, *Job[okArgs]) error { return nil }), nil)
	if f, ok := reg.ArgFields("test.ok.v1"); !ok || len(f) != 6 || f[5].Name != "nick" || !f[5].Sensitive {
		t.Errorf("ArgFields(test.ok.v1) = %+v, %v", f, ok)
	}
	if _, ok := reg.ArgFields("test.absent.v1"); ok {
		t.Error("ArgFields of an unregistered kind reports it registered")
	}
}
