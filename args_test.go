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
