package twicestore

import (
	"time"

	"github.com/twicejobs/twice/twicetype"
)

// NodeHeartbeatParams describe a live node.
type NodeHeartbeatParams struct {
	Node *twicetype.Node
}

// NodeListParams define which nodes count as alive.
type NodeListParams struct {
	AliveSince time.Time
}

// NodeRemoveParams name a node.
type NodeRemoveParams struct {
	ID string
}
