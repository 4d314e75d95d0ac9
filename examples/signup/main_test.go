package main

import (
	"bytes"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the example's test when the example leaves a goroutine
// running after it returns: a program that copies it must shut down clean.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

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
