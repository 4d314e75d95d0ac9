package twice_test

import (
	"context"
	"maps"
	"testing"

	"github.com/twicejobs/twice"
)

// TestEnqueueOptsMetadata: a call's metadata is stored beside the
// client's hook's, wins on a shared key, and neither map is written to.
func TestEnqueueOptsMetadata(t *testing.T) {
	t.Parallel()
	hook := map[string]string{"traceparent": "from-hook", "tenant": "a"}
	cfg := testConfig(twice.NewRegistry())
	cfg.EnqueueMetadata = func(context.Context) map[string]string { return hook }
	client, err := twice.NewClient(newStore(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	call := map[string]string{"traceparent": "from-call", "source": "api"}
	res, err := client.EnqueueJSON(t.Context(), "meta.any.v1", []byte(`{"n":1}`),
		&twice.EnqueueOpts{Metadata: call, AllowUnknownKind: true})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"traceparent": "from-call", "tenant": "a", "source": "api"}
	if got := res.Job.Metadata; !maps.Equal(got, want) {
		t.Fatalf("metadata %v, want %v", got, want)
	}
	if len(hook) != 2 || hook["traceparent"] != "from-hook" || len(call) != 2 {
		t.Fatalf("the maps were written to: hook %v, call %v", hook, call)
	}
	bad := &twice.EnqueueOpts{Metadata: map[string]string{"k": "a\x00"}, AllowUnknownKind: true}
	if _, err := client.EnqueueJSON(t.Context(), "meta.any.v1", []byte(`{"n":1}`), bad); err == nil {
		t.Fatal("a NUL in metadata was enqueued")
	}
}
