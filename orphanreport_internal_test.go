package twice

import (
	"testing"
	"time"

	"github.com/twicejobs/twice/twicetype"
)

// TestFleetSettled: the first orphan report waits for the fleet's view
// in the store, whatever this node's own uptime.
func TestFleetSettled(t *testing.T) {
	now := time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)
	started := func(ago ...time.Duration) []*twicetype.Node {
		nodes := make([]*twicetype.Node, len(ago))
		for i, d := range ago {
			nodes[i] = &twicetype.Node{ID: "n", StartedAt: now.Add(-d), HeartbeatAt: now}
		}
		return nodes
	}
	for _, tc := range []struct {
		name  string
		nodes []*twicetype.Node
		want  bool
	}{
		{"no live node", nil, false},
		{"a deploy: every node just started", started(0, 2*time.Second, 5*time.Second), false},
		{"a node up for the window", started(nodeAliveWindow), true},
		{"a node just started among older ones", started(0, time.Hour), true},
		{"a crash loop: this run and the last one, alive till its window ends", started(10*time.Second, 34*time.Second), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := fleetSettled(tc.nodes, now); got != tc.want {
				t.Errorf("fleetSettled = %v, want %v", got, tc.want)
			}
		})
	}
}
