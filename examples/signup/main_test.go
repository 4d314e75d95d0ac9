package main

import (
	"bytes"
	"path/filepath"
	"testing"
)

// TestSignup runs the example: three signups converge.
func TestSignup(t *testing.T) {
	var out bytes.Buffer
	if err := run(t.Context(), filepath.Join(t.TempDir(), "signup.db"), 3, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	want := `signed up 3 users, each with its verification email and welcome bonus in one transaction
a retrying producer sent every bonus a second time
verification emails sent: 3 for 3 users (at least one each)
welcome bonuses: 500 cents each, credited once though delivered twice
converged: every effect is what its strategy promises
`
	if out.String() != want {
		t.Errorf("output:\n%s\nwant:\n%s", out.String(), want)
	}
}
