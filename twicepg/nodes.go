package twicepg

import (
	"context"
	"fmt"

	"github.com/twicejobs/twice/internal/dbrows"
	"github.com/twicejobs/twice/internal/driverkit"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// NodeHeartbeat inserts the node or replaces what it last reported.
func (e *executor) NodeHeartbeat(ctx context.Context, p *twicestore.NodeHeartbeatParams) error {
	n := p.Node
	kinds, queues := n.Kinds, n.Queues
	if kinds == nil { // a nil slice would be a NULL array
		kinds = []string{}
	}
	if queues == nil {
		queues = []string{}
	}
	_, err := e.q.exec(ctx, `INSERT INTO twice_nodes (id, host, pid, kinds, queues, started_at, heartbeat_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7)
		ON CONFLICT (id) DO UPDATE SET host = excluded.host, pid = excluded.pid, kinds = excluded.kinds,
			queues = excluded.queues, started_at = excluded.started_at, heartbeat_at = excluded.heartbeat_at`,
		n.ID, n.Host, n.PID, kinds, queues, n.StartedAt, nowOr(n.HeartbeatAt))
	if err != nil {
		return fmt.Errorf("heartbeat node %q: %w", n.ID, err)
	}
	return nil
}

// NodeList lists the nodes whose heartbeat is at or after AliveSince, by id.
func (e *executor) NodeList(ctx context.Context, p *twicestore.NodeListParams) ([]*twicetype.Node, error) {
	// The arrays come back as JSON text, which pgx and database/sql both
	// scan into a string.
	rs, err := e.q.query(ctx, `SELECT id, host, pid, to_json(kinds)::text, to_json(queues)::text, started_at, heartbeat_at
		FROM twice_nodes WHERE heartbeat_at >= $1 ORDER BY id`, p.AliveSince)
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	nodes, err := dbrows.Collect(rs, driverkit.NodeRow(driverkit.NativeTimes))
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	return nodes, nil
}

// NodeRemove deletes the node; removing an unknown node is not an error.
func (e *executor) NodeRemove(ctx context.Context, p *twicestore.NodeRemoveParams) error {
	if _, err := e.q.exec(ctx, `DELETE FROM twice_nodes WHERE id = $1`, p.ID); err != nil {
		return fmt.Errorf("remove node %q: %w", p.ID, err)
	}
	return nil
}
