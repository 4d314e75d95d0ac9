package ops

import (
	"reflect"
	"testing"
)

func TestRedact(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		raw       string
		fields    []string
		want      string
		wantNames []string
	}{
		{"exact name", `{"user_id":7,"reset_token":"s3cr3t"}`, []string{"reset_token", "absent"},
			`{"reset_token":"[redacted]","user_id":7}`, []string{"reset_token"}},
		// encoding/json decodes "apitoken" into the field APIToken: the
		// value is the sensitive field's, so it is redacted as well.
		{"other case", `{"apitoken":"s3cr3t","n":1}`, []string{"APIToken"},
			`{"apitoken":"[redacted]","n":1}`, []string{"apitoken"}},
		{"every spelling of one field", `{"APIToken":"a","apiToken":"b"}`, []string{"APIToken"},
			`{"APIToken":"[redacted]","apiToken":"[redacted]"}`, []string{"APIToken", "apiToken"}},
		{"no sensitive fields", `{"n":1}`, nil, `{"n":1}`, nil},
		{"nothing matches", `{"n":1}`, []string{"m"}, `{"n":1}`, nil},
		{"not an object", `[1]`, []string{"x"}, `[1]`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, names := Redact([]byte(tt.raw), tt.fields)
			if string(got) != tt.want || !reflect.DeepEqual(names, tt.wantNames) {
				t.Errorf("Redact(%s, %v) = %s, %v; want %s, %v", tt.raw, tt.fields, got, names, tt.want, tt.wantNames)
			}
		})
	}
}
