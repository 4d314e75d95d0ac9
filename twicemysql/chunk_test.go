package twicemysql

import (
	"testing"

	"github.com/twicejobs/twice/twicestore"
)

// TestChunkEnd: a multi-row INSERT carries at most insertChunk jobs and,
// unless it is one job, at most insertChunkBytes of payload.
func TestChunkEnd(t *testing.T) {
	jobs := func(n, size int) []*twicestore.JobInsertParams {
		out := make([]*twicestore.JobInsertParams, n)
		for i := range out {
			out[i] = &twicestore.JobInsertParams{Args: make([]byte, size)}
		}
		return out
	}
	tests := []struct {
		name        string
		jobs        []*twicestore.JobInsertParams
		start, want int
	}{
		{"small payloads: the count bounds", jobs(1200, 100), 0, insertChunk},
		{"the last chunk", jobs(1200, 100), 1000, 1200},
		{"1 MiB payloads: the bytes bound", jobs(10, 1<<20), 0, 4},
		{"one payload over the bound goes alone", jobs(3, 8<<20), 1, 2},
	}
	for _, tt := range tests {
		if got := chunkEnd(tt.jobs, tt.start); got != tt.want {
			t.Errorf("%s: chunkEnd(%d jobs, %d) = %d, want %d", tt.name, len(tt.jobs), tt.start, got, tt.want)
		}
	}
}
