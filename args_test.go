package twice

import (
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
	}
	for _, tt := range tests {
		err := ValidateKind(tt.kind)
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
		"EmailIDs", "AccessKeyID", "SessionID", "UserID", "PasswordResetID", "CardType",
		// Words that merely contain a sensitive one.
		"DiscardAfter", "Wildcard", "Cardinality", "Pinned", "Spinner", "Shipping", "Zipped", "Tipping",
		"Domain", "Recipe", "Opinion", "Keyword",
		// Ordinary fields.
		"Country", "Amount", "Cents", "OrderID", "Name", "Address", "Key", "Session", "Count", "ID", "",
	}
	for name, want := range refused {
		m, ok := sensitiveWord(name)
		if !ok || m.phrase != want {
			t.Errorf("%q: matched %q (%v), want refused for %q", name, m.phrase, ok, want)
		}
	}
	for _, name := range allowed {
		if m, ok := sensitiveWord(name); ok {
			t.Errorf("%q: refused for %q, want allowed", name, m.phrase)
		}
	}
}
