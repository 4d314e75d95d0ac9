package main

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the example's test when the example leaves a goroutine
// running after it returns: a program that copies it must shut down clean.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestAdmin(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), filepath.Join(t.TempDir(), "admin.db"), &out); err != nil {
		t.Fatal(err)
	}
	want := `scheduled jobs in reports: 1
cancel: job is cancelled
cancel: job 1 is cancelled: job already finished; nothing to cancel (finished: true)
note: cancelled by ops@example.com: customer closed the account
pause reprots: unknown queue: true, usage error: true
queue reports paused by ops@example.com: warehouse migration
retry: job is available
switch a typo: twice: set kill switch: kind "report.montly.v1" is in no catalog, not registered here and handled by no live worker; did you mean report.monthly.v1? (Force stores it anyway, for a kind whose workers have not run yet)
history: none -> off by ops@example.com: renderer leaks memory
`
	if out.String() != want {
		t.Fatalf("output:\n%s\nwant:\n%s", out.String(), want)
	}
}
