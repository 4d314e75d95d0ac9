package cli

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/testkit/waitfor"
	"github.com/twicejobs/twice/twicesqlite"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// hostile is stored text that, printed raw, retitles the terminal, clears
// it, plants a link (OSC 8) and starts a C1 control sequence.
const hostile = "title\x1b]0;pwned\x07 clear\x1b[2J link\x1b]8;;https://evil.example\x1b\\click\x1b]8;;\x1b\\ csi\u009b31m end"

type hostileArgs struct{ N int }

func (hostileArgs) Kind() string { return "cli.hostile.v1" }

// wantEscaped fails unless out holds none of hostile's control bytes and
// shows them escaped: the first one only for a listing (full false), which
// cuts the text short.
func wantEscaped(t *testing.T, what, out string, full bool) {
	t.Helper()
	if strings.ContainsAny(out, "\x1b\x07\u009b") {
		t.Errorf("%s prints terminal control sequences raw:\n%q", what, out)
	}
	if !strings.Contains(out, `\x1b]0;pwned\a`) || full && (!strings.Contains(out, `\x1b[2J`) || !strings.Contains(out, `\u009b31m`)) {
		t.Errorf("%s does not show the control sequences escaped:\n%s", what, out)
	}
}

// TestStoredTextEscaped (issue 20 #12): an error, a note and a workflow's
// and task's names that carry terminal control sequences are printed
// escaped by jobs show, jobs ls, dlq ls, workflows ls and workflows show,
// as toggles history prints a reason.
func TestStoredTextEscaped(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	store, err := twicesqlite.Open(ctx, s.db)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = store.Close() }()
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[hostileArgs](func(context.Context, *twice.Job[hostileArgs]) error {
		return twice.Permanent(errors.New(hostile))
	}), &twice.KindOpts{Strategy: twice.None})
	client, err := twice.NewClient(store, twice.Config{Registry: reg, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	res, err := client.Enqueue(ctx, hostileArgs{N: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitfor.Cond(t, "the hostile job to die", func() bool {
		j, err := store.JobGet(ctx, &twicestore.JobGetParams{ID: res.Job.ID})
		return err == nil && j.State == twicetype.JobStateDead
	}, nil)
	if err := client.Shutdown(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := client.EnqueueWorkflow(ctx, twice.NewWorkflow("wf "+hostile).Add("task "+hostile, wfStepArgs{"x"}, nil)); err != nil {
		t.Fatal(err)
	}

	id := strconv.FormatInt(res.Job.ID, 10)
	for _, tc := range []struct {
		args []string
		full bool
	}{
		{[]string{"jobs", "show", id}, true},
		{[]string{"jobs"}, false},
		{[]string{"dlq", "ls"}, false},
		{[]string{"workflows", "ls"}, false},
		{[]string{"workflows", "show", "1"}, true},
	} {
		wantEscaped(t, strings.Join(tc.args, " "), s.ok(tc.args...).stdout, tc.full)
	}
}

func TestTerminalText(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain \"quoted\" C:\\path café", "plain \"quoted\" C:\\path café"},
		{"a\x1b[2Jb", `a\x1b[2Jb`},
		{"bell\a del\x7f", `bell\a del\x7f`},
		{"tab\tnew\nline\r", `tab\tnew\nline\r`},
		{"c1\u009b1m", `c1\u009b1m`},
		{"bidi\u202eevil", `bidi\u202eevil`},
		{"bad\xff\xfebytes", `bad\xff\xfebytes`},
	} {
		if got := terminalText(tc.in); got != tc.want {
			t.Errorf("terminalText(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
