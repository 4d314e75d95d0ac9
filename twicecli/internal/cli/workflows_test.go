package cli

import (
	"context"
	"strings"
	"testing"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicesqlite"
)

type wfStepArgs struct{ Step string }

func (wfStepArgs) Kind() string { return "cli.wfstep.v1" }

// TestWorkflowsCommands: ls lists a workflow, show its tasks, cancel stops
// it (and a second cancel says it is cancelled already); bad ids are usage
// errors.
func TestWorkflowsCommands(t *testing.T) {
	s := newSetup(t)
	ctx := context.Background()
	store, err := twicesqlite.Open(ctx, s.db)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = store.Close() }()
	client, err := twice.NewClient(store, twice.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.EnqueueWorkflow(ctx, twice.NewWorkflow("import").Add("fetch", wfStepArgs{"fetch"}, nil).
		Add("load", wfStepArgs{"load"}, nil, "fetch")); err != nil {
		t.Fatal(err)
	}
	if out := s.ok("workflows", "ls").stdout; !strings.Contains(out, "import") || !strings.Contains(out, "running") || !strings.Contains(out, "0/2") {
		t.Fatalf("workflows ls:\n%s", out)
	}
	out := s.ok("workflows", "show", "1").stdout
	for _, want := range []string{`workflow 1 "import": running, 0/2`, "fetch", "available", "load", "pending", "fetch (waiting for fetch)"} {
		if !strings.Contains(out, want) {
			t.Fatalf("workflows show lacks %q:\n%s", want, out)
		}
	}
	if out := s.ok("workflows", "show", "1", "--json").stdout; !strings.Contains(out, `"task_list"`) || !strings.Contains(out, `"on_dead": "hold"`) ||
		!strings.Contains(out, `"code": "dependencies"`) || !strings.Contains(out, `"code": "orphaned"`) {
		t.Fatalf("workflows show --json:\n%s", out)
	}
	if out := s.ok("workflows", "cancel", "1", "--reason", "wrong file", "--by", "ops").stdout; !strings.Contains(out, "cancelled workflow 1: 1 waiting tasks will not run, 1 jobs") {
		t.Fatalf("workflows cancel: %s", out)
	}
	wantError(t, s.run("workflows", "cancel", "1", "--reason", "again"), ExitFailure, "cancelled already")
	wantError(t, s.run("workflows", "show", "x"), ExitUsage, "not a workflow id")
	wantError(t, s.run("workflows", "show", "9"), ExitUsage, "workflow 9 not found")
	wantError(t, s.run("workflows", "cancel", "1"), ExitUsage, "--reason is required")
}

// TestWorkflowsListPages (issue 20 #14 and #15): workflows ls pages with
// --before as jobs does, saying where the next page starts; a limit out
// of range or a negative --before is a usage error.
func TestWorkflowsListPages(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	store, err := twicesqlite.Open(ctx, s.db)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = store.Close() }()
	client, err := twice.NewClient(store, twice.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"first", "second", "third"} {
		if _, err := client.EnqueueWorkflow(ctx, twice.NewWorkflow(name).Add("fetch", wfStepArgs{"fetch"}, nil)); err != nil {
			t.Fatal(err)
		}
	}
	r := s.ok("workflows", "ls", "--limit", "2")
	if !strings.Contains(r.stdout, "third") || !strings.Contains(r.stdout, "second") || strings.Contains(r.stdout, "first") ||
		r.stderr != "more may follow: add --before 2\n" {
		t.Errorf("workflows ls --limit 2:\n%s%s", r.stdout, r.stderr)
	}
	r = s.ok("workflows", "ls", "--limit", "2", "--before", "2")
	if !strings.Contains(r.stdout, "first") || strings.Contains(r.stdout, "second") || r.stderr != "" {
		t.Errorf("workflows ls --before 2:\n%s%s", r.stdout, r.stderr)
	}
	wantError(t, s.run("workflows", "ls", "--limit", "-1"), ExitUsage, "--limit -1", "from 1 to 1000")
	wantError(t, s.run("workflows", "ls", "--limit", "0"), ExitUsage, "--limit 0")
	wantError(t, s.run("workflows", "ls", "--before", "-3"), ExitUsage, "--before -3")
}
