package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/twicejobs/twice"
)

// Two deploys of payout.send.v1: the one whose jobs wait, and one that
// renames its reference field.
type (
	payoutOld struct {
		PayoutID  int64  `json:"payout_id"`
		Reference string `json:"reference"`
	}
	payoutRenamed struct {
		PayoutID int64  `json:"payout_id"`
		Ref      string `json:"ref"`
	}
	payoutAdded struct {
		PayoutID  int64  `json:"payout_id"`
		Reference string `json:"reference"`
		Currency  string `json:"currency"`
	}
)

func (payoutOld) Kind() string     { return "payout.send.v1" }
func (payoutRenamed) Kind() string { return "payout.send.v1" }
func (payoutAdded) Kind() string   { return "payout.send.v1" }

// payoutBinary is the CLI of a worker binary that registers T as
// payout.send.v1 with opts.
func payoutBinary[T twice.Args](t *testing.T, opts *twice.KindOpts) Options {
	t.Helper()
	reg := twice.NewRegistry()
	if err := twice.Register(reg, twice.HandlerFunc[T](func(context.Context, *twice.Job[T]) error { return nil }), opts); err != nil {
		t.Fatal(err)
	}
	return Options{Registry: reg}
}

// TestKindsCheck (issue 25 item 3): a binary that renames a field of
// payout.send.v1 while v1 jobs wait fails 'kinds check' and 'serve' with
// exit 1 naming the field, the jobs and v2; one that adds a field, or
// allows the change, passes.
func TestKindsCheck(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	do := func(opts Options, args ...string) result {
		t.Helper()
		return runWith(t, t.Context(), opts, append(args, "--db", s.db)...)
	}
	old := payoutBinary[payoutOld](t, nil)

	r := do(old, "kinds", "check")
	if r.code != ExitOK || !strings.Contains(r.stdout, "payout.send.v1: new") || !strings.Contains(r.stdout, "1 kind checked: 1 new") {
		t.Fatalf("kinds check on an empty database: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for range 2 {
		if r := do(old, "enqueue", "payout.send.v1", `{"payout_id":7,"reference":"INV-7"}`, "--delay", "1h"); r.code != ExitOK {
			t.Fatalf("enqueue: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
	}
	if r := do(old, "kinds", "check"); r.code != ExitOK || !strings.Contains(r.stdout, "payout.send.v1: unchanged (2 jobs read)") {
		t.Errorf("kinds check of the same binary: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	renamed := payoutBinary[payoutRenamed](t, nil)
	wants := []string{`kind "payout.send.v1"`, `field "reference" was removed or renamed, but 2 waiting jobs carry it`, `"payout.send.v2"`}
	wantError(t, do(renamed, "kinds", "check"), ExitFailure, wants...)
	r = do(renamed, "kinds", "check", "--json")
	wantError(t, r, ExitFailure, wants...)
	var rep twice.ArgsReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("kinds check --json: %v\n%s", err, r.stdout)
	}
	if len(rep.Kinds) != 1 || rep.Kinds[0].Verdict != twice.ArgsIncompatible || len(rep.Kinds[0].Changes) == 0 ||
		rep.Kinds[0].Changes[0].Field != "reference" || rep.Kinds[0].Changes[0].Jobs != 2 {
		t.Errorf("kinds check --json = %s", r.stdout)
	}
	// The worker binary itself refuses to start, with the same message.
	wantError(t, do(renamed, "serve"), ExitFailure, wants...)

	r = do(payoutBinary[payoutAdded](t, nil), "kinds", "check")
	if r.code != ExitOK || !strings.Contains(r.stdout, "compatible") || !strings.Contains(r.stdout, `field "currency" was added`) {
		t.Errorf("kinds check with an added field: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = do(payoutBinary[payoutRenamed](t, &twice.KindOpts{ArgsChangeAllowed: "references were reissued"}), "kinds", "check")
	if r.code != ExitOK || !strings.Contains(r.stdout, "allowed: references were reissued") {
		t.Errorf("kinds check with ArgsChangeAllowed: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// TestKindsCheckBadInput: an unknown kind, an --against other than
// catalog, and a binary without kinds are usage errors.
func TestKindsCheckBadInput(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	do := func(opts Options, args ...string) result {
		t.Helper()
		return runWith(t, t.Context(), opts, append(args, "--db", s.db)...)
	}
	bin := payoutBinary[payoutOld](t, nil)
	wantError(t, do(bin, "kinds", "check", "payout.nope.v1"), ExitUsage, `"payout.nope.v1"`, "does not register it")
	wantError(t, do(bin, "kinds", "check", "--against", "./worker"), ExitUsage, "running './worker kinds schema' failed", "give the path of a twice worker binary")
	wantError(t, do(Options{}, "kinds", "check"), ExitUsage, "registers no kinds")
	wantError(t, do(bin, "kinds"), ExitUsage, "missing subcommand")
}
