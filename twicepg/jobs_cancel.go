package twicepg

// Cancel requests reach the node running a job at once: JobCancel notifies
// the cancel channel with the job's id, and ListenCancels delivers it.

import (
	"context"
	"strconv"

	"github.com/twicejobs/twice/twicestore"
)

// cancelChannel is the cancel channel of the public schema; other schemas
// append their name to it, as the insert channel does.
const cancelChannel = "twice_cancel"

var _ twicestore.CancelListener = (*Store)(nil)

// ListenCancels calls notify with a job's id whenever JobCancel records a
// cancel request for it while it runs (in any process using this database
// and schema), until ctx is done; then it returns ctx's error. It
// reconnects like ListenInserts; a request sent while it is not listening
// still reaches the worker at its next lease extension. It implements
// twicestore.CancelListener.
func (s *Store) ListenCancels(ctx context.Context, notify func(jobID int64)) error {
	return s.listenLoop(ctx, s.notify.cancelChannel, func(payload string) {
		if id, err := strconv.ParseInt(payload, 10, 64); err == nil {
			notify(id)
		}
	})
}
