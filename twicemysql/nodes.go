package twicemysql

import (
	"context"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// Not written yet: to be replaced by the port of twicesqlite/nodes.go.

func (e *executor) NodeHeartbeat(_ context.Context, _ *twicestore.NodeHeartbeatParams) error {
	return errNotImplemented
}
func (e *executor) NodeList(_ context.Context, _ *twicestore.NodeListParams) ([]*twicetype.Node, error) {
	return nil, errNotImplemented
}
func (e *executor) NodeRemove(_ context.Context, _ *twicestore.NodeRemoveParams) error {
	return errNotImplemented
}
