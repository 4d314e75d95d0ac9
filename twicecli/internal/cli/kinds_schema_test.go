package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twicejobs/twice"
)

// testWorkerEnv, set to a name of testWorkers, makes the test binary run
// as that worker binary's CLI (see TestMain): a real executable for
// 'kinds check --against'.
const testWorkerEnv = "TWICE_CLI_TEST_WORKER"

// testWorkers are the worker binaries the test binary can play.
var testWorkers = map[string]func() (*twice.Registry, error){
	"payout-old":     payoutRegistry[payoutOld],
	"payout-renamed": payoutRegistry[payoutRenamed],
	"stock":          func() (*twice.Registry, error) { return twice.NewRegistry(), nil },
}

// payoutRegistry registers T as payout.send.v1.
func payoutRegistry[T twice.Args]() (*twice.Registry, error) {
	reg := twice.NewRegistry()
	err := twice.Register(reg, twice.HandlerFunc[T](func(context.Context, *twice.Job[T]) error { return nil }), nil)
	return reg, err
}

// runTestWorker runs the CLI of the named worker binary on the process's
// arguments and returns its exit code.
func runTestWorker(name string) int {
	newReg, ok := testWorkers[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "%s=%q names no test worker\n", testWorkerEnv, name)
		return ExitUsage
	}
	reg, err := newReg()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return ExitFailure
	}
	return Main(context.Background(), Options{Registry: reg}, os.Args[1:], os.Stdout, os.Stderr)
}

// workerBinary writes an executable that runs the test binary as the
// named worker binary, and returns its path.
func workerBinary(t *testing.T, name string) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), name)
	script := fmt.Sprintf("#!/bin/sh\n%s=%s exec %q \"$@\"\n", testWorkerEnv, name, self)
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestKindsCheckAgainstBinary (issue 25 item 3): 'kinds check --against
// BINARY' compares this build's args with the deployed build's, with no
// database: a renamed field fails with exit 1 naming the field, the
// binary and v2; an added field, the same args, or an allowed change
// pass; a path that is not a twice worker binary is bad input.
func TestKindsCheckAgainstBinary(t *testing.T) {
	t.Parallel()
	old := workerBinary(t, "payout-old")
	ctx := t.Context()

	r := runWith(t, ctx, Options{}, "kinds", "schema")
	var stock twice.ArgsSchema
	if err := json.Unmarshal([]byte(r.stdout), &stock); r.code != ExitOK || err != nil || stock.Format != twice.ArgsSchemaFormat || len(stock.Kinds) != 0 {
		t.Fatalf("stock kinds schema: exit %d, %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}

	renamed := payoutBinary[payoutRenamed](t, nil)
	wantError(t, runWith(t, ctx, renamed, "kinds", "check", "--against", old), ExitFailure,
		`kind "payout.send.v1"`, `field "reference" was removed or renamed, but binary `+old+` has it`, `"payout.send.v2"`)
	r = runWith(t, ctx, renamed, "kinds", "check", "--against", old, "--json")
	var rep twice.ArgsReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || r.code != ExitFailure {
		t.Fatalf("kinds check --against --json: exit %d, %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	if k := rep.Kinds[0]; k.Verdict != twice.ArgsIncompatible || k.Changes[0].Binary != old || k.Changes[0].Field != "reference" {
		t.Errorf("report: %+v", rep)
	}

	for _, tc := range []struct {
		name string
		opts Options
		want string
	}{
		{"same args", payoutBinary[payoutOld](t, nil), "payout.send.v1: unchanged"},
		{"added field", payoutBinary[payoutAdded](t, nil), `payout.send.v1: compatible: field "currency" was added (string)`},
		{"allowed rename", payoutBinary[payoutRenamed](t, &twice.KindOpts{ArgsChangeAllowed: "references were reissued"}),
			"payout.send.v1: allowed"},
	} {
		r := runWith(t, ctx, tc.opts, "kinds", "check", "--against", old)
		if r.code != ExitOK || !strings.Contains(r.stdout, tc.want) {
			t.Errorf("%s: exit %d, want 0 and %q\n%s%s", tc.name, r.code, tc.want, r.stdout, r.stderr)
		}
	}

	// The deployed build checked against the renamed one: the field it
	// lacks is the one the new build adds, which is compatible.
	r = runWith(t, ctx, payoutBinary[payoutOld](t, nil), "kinds", "check", "--against", workerBinary(t, "payout-renamed"))
	if r.code != ExitFailure || !strings.Contains(r.stdout, `field "ref" was removed or renamed`) {
		t.Errorf("old against renamed: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	notWorker := filepath.Join(t.TempDir(), "prints-json")
	if err := os.WriteFile(notWorker, []byte("#!/bin/sh\necho '{\"format\":\"other\"}'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ against, want string }{
		{"/bin/echo", "printed no args schema"},
		{filepath.Join(t.TempDir(), "missing"), "running '"},
		{"/bin/false", "running '"},
		{notWorker, "is not the args schema of a twice worker"},
		{os.Args[0] + "-absent", "give the path of a twice worker binary"},
	} {
		wantError(t, runWith(t, ctx, renamed, "kinds", "check", "--against", tc.against), ExitUsage, tc.want)
	}
	stockBin := workerBinary(t, "stock")
	wantError(t, runWith(t, ctx, renamed, "kinds", "check", "--against", stockBin), ExitUsage, "registers no kinds, so it is not a worker binary")
}
