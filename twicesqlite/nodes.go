package twicesqlite

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
	if kinds == nil {
		kinds = []string{}
	}
	if queues == nil {
		queues = []string{}
	}
	err := e.write(ctx, func() error {
		_, err := e.db.ExecContext(ctx, `INSERT INTO twice_nodes (id, host, pid, kinds, queues, started_at, heartbeat_at)
		VALUES (?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET host = excluded.host, pid = excluded.pid, kinds = excluded.kinds,
			queues = excluded.queues, started_at = excluded.started_at, heartbeat_at = excluded.heartbeat_at`,
			n.ID, n.Host, n.PID, jsonArg(kinds), jsonArg(queues), micros(n.StartedAt), micros(nowOr(n.HeartbeatAt)))
		return err
	})
	if err != nil {
		return fmt.Errorf("heartbeat node %q: %w", n.ID, err)
	}
	return nil
}

// NodeList lists the nodes whose heartbeat is at or after AliveSince, by id.
func (e *executor) NodeList(ctx context.Context, p *twicestore.NodeListParams) ([]*twicetype.Node, error) {
	rows, err := e.db.QueryContext(ctx, `SELECT id, host, pid, kinds, queues, started_at, heartbeat_at
		FROM twice_nodes WHERE heartbeat_at >= ? ORDER BY id`, micros(p.AliveSince))
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	nodes, err := dbrows.Collect(rows, driverkit.NodeRow(driverkit.MicrosTimes))
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	return nodes, nil
}

// NodeRemove deletes the node; removing an unknown node is not an error.
func (e *executor) NodeRemove(ctx context.Context, p *twicestore.NodeRemoveParams) error {
	err := e.write(ctx, func() error {
		_, err := e.db.ExecContext(ctx, `DELETE FROM twice_nodes WHERE id = ?`, p.ID)
		return err
	})
	if err != nil {
		return fmt.Errorf("remove node %q: %w", p.ID, err)
	}
	return nil
}
