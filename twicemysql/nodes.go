package twicemysql

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/twicejobs/twice/internal/dbrows"
	"github.com/twicejobs/twice/internal/driverkit"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// NodeHeartbeat inserts the node or replaces what it last reported. Only
// this node writes its row, so one upsert is enough: no read precedes it.
// The new values are bound twice rather than read back with VALUES(col),
// which MySQL 8.0.20 deprecates for a row alias that MariaDB lacks.
func (e *executor) NodeHeartbeat(ctx context.Context, p *twicestore.NodeHeartbeatParams) error {
	n := p.Node
	fields := []any{n.Host, n.PID, stringsJSON(n.Kinds), stringsJSON(n.Queues), dbTime(n.StartedAt),
		dbTime(nowOr(n.HeartbeatAt))}
	_, err := e.db.ExecContext(ctx, `INSERT INTO twice_nodes (id, host, pid, kinds, queues, started_at, heartbeat_at)
		VALUES (?, ?, ?, ?, ?, ?, ?)
		ON DUPLICATE KEY UPDATE host = ?, pid = ?, kinds = ?, queues = ?, started_at = ?, heartbeat_at = ?`,
		slices.Concat([]any{n.ID}, fields, fields)...)
	if err != nil {
		return fmt.Errorf("heartbeat node %q: %w", n.ID, mapError(err))
	}
	return nil
}

// stringsJSON encodes a list of names for a JSON column; none is "[]".
func stringsJSON(names []string) string {
	if names == nil {
		names = []string{}
	}
	b, _ := json.Marshal(names) // strings always encode
	return string(b)
}

// NodeList lists the nodes whose heartbeat is at or after AliveSince, by id.
func (e *executor) NodeList(ctx context.Context, p *twicestore.NodeListParams) ([]*twicetype.Node, error) {
	rows, err := e.db.QueryContext(ctx, `SELECT id, host, pid, kinds, queues, started_at, heartbeat_at
		FROM twice_nodes WHERE heartbeat_at >= ? ORDER BY id`, dbTime(p.AliveSince))
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	nodes, err := dbrows.Collect(rows, driverkit.NodeRow(driverkit.NativeTimes))
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	return nodes, nil
}

// NodeRemove deletes the node; removing an unknown node is not an error.
func (e *executor) NodeRemove(ctx context.Context, p *twicestore.NodeRemoveParams) error {
	if _, err := e.db.ExecContext(ctx, `DELETE FROM twice_nodes WHERE id = ?`, p.ID); err != nil {
		return fmt.Errorf("remove node %q: %w", p.ID, mapError(err))
	}
	return nil
}
