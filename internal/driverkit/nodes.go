package driverkit

import (
	"encoding/json"
	"fmt"

	"github.com/twicejobs/twice/internal/dbrows"
	"github.com/twicejobs/twice/twicetype"
)

// NodeRow returns the reader of one row of twice_nodes, its columns
// selected as id, host, pid, kinds, queues (JSON arrays of names, as
// text), started_at, heartbeat_at; its times read as tm says.
func NodeRow[T, N any](tm Times[T, N]) func(dbrows.Scanner) (*twicetype.Node, error) {
	return func(r dbrows.Scanner) (*twicetype.Node, error) {
		var (
			n                  twicetype.Node
			kinds, queues      string
			started, heartbeat T
		)
		if err := r.Scan(&n.ID, &n.Host, &n.PID, &kinds, &queues, &started, &heartbeat); err != nil {
			return nil, err
		}
		if err := json.Unmarshal([]byte(kinds), &n.Kinds); err != nil {
			return nil, fmt.Errorf("node %q kinds: %w", n.ID, err)
		}
		if err := json.Unmarshal([]byte(queues), &n.Queues); err != nil {
			return nil, fmt.Errorf("node %q queues: %w", n.ID, err)
		}
		n.StartedAt, n.HeartbeatAt = tm.At(started), tm.At(heartbeat)
		return &n, nil
	}
}
