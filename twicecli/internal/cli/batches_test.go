package cli

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicesqlite"
)

// TestBatchesCommands: ls lists batches with their counters, --unfinished
// only those still running, show one batch and its callback; a missing or
// bad id is a usage error.
func TestBatchesCommands(t *testing.T) {
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
	res, err := client.EnqueueBatch(ctx, twice.NewBatch(wfStepArgs{"report"}, nil).
		Add(wfStepArgs{"a"}, nil).Add(wfStepArgs{"b"}, nil).OnSuccess())
	if err != nil {
		t.Fatal(err)
	}
	id := strconv.FormatInt(res.Batch.ID, 10)
	out := s.ok("batches", "ls").stdout
	for _, want := range []string{"ID", "running", "2/2", "cli.wfstep.v1 (when the batch finishes)"} {
		if !strings.Contains(out, want) {
			t.Fatalf("batches ls lacks %q:\n%s", want, out)
		}
	}
	if out := s.ok("batches", "ls", "--unfinished").stdout; !strings.Contains(out, "running") {
		t.Fatalf("batches ls --unfinished:\n%s", out)
	}
	out = s.ok("batches", "show", id).stdout
	if want := "batch " + id + ": running, 2 of 2 jobs pending, 0 completed, 0 dead, 0 cancelled"; !strings.Contains(out, want) ||
		!strings.Contains(out, "only if no job of the batch fails") {
		t.Fatalf("batches show:\n%s\nwant %q", out, want)
	}
	var b batchJSON
	if err := json.Unmarshal([]byte(s.ok("batches", "show", id, "--json").stdout), &b); err != nil || b.Total != 2 || b.State != "running" || !b.OnSuccess {
		t.Fatalf("batches show --json: %+v, %v", b, err)
	}
	wantError(t, s.run("batches", "show", "999"), ExitUsage, "batch 999 not found")
	wantError(t, s.run("batches", "show", "x"), ExitUsage, "")
	wantError(t, s.run("batches", "ls", "--limit", "0"), ExitUsage, "--limit 0")
}
