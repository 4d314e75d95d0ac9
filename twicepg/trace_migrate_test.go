package twicepg

import (
	"testing"

	"github.com/twicejobs/twice/twicestore/storetest"
	"github.com/twicejobs/twice/twicetype"
)

func TestMigration020AttemptTrace(t *testing.T) {
	t.Parallel()
	storetest.TraceUpgrade(t, func(t *testing.T, version int) storetest.OldRows {
		return openOldSchema(t, version).(oldSchema)
	}, 19)
}

func (o oldSchema) InsertJobAt(t *testing.T, state twicetype.JobState, epoch int64) int64 {
	t.Helper()
	var id int64
	if err := o.conn.QueryRow(t.Context(), `INSERT INTO twice_jobs (kind, queue, args, state, max_attempts, attempt, epoch, errors,
			run_at, created_at, finished_at)
		VALUES ('k.v1', 'default', '\x7b7d', $1, 3, 1, $2, '[{"attempt": 1, "at": "2026-01-01T00:00:00Z", "error": "boom"}]',
			now(), now(), CASE WHEN $3 THEN now() END)
		RETURNING id`, string(state), epoch, state.Finished()).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

func (o oldSchema) InsertMarker(t *testing.T, handler, key string, id, epoch int64) {
	t.Helper()
	if _, err := o.conn.Exec(t.Context(), `INSERT INTO twice_markers (handler, key, processed_at, job_id, epoch)
		VALUES ($1, $2, now(), $3, $4)`, handler, key, id, epoch); err != nil {
		t.Fatal(err)
	}
}

func (o oldSchema) InsertWorkflow(t *testing.T) (wf, a int64) {
	t.Helper()
	ctx := t.Context()
	if err := o.conn.QueryRow(ctx, `INSERT INTO twice_workflows (name, on_dead, tasks, created_at)
		VALUES ('wf', 'hold', 2, now()) RETURNING id`).Scan(&wf); err != nil {
		t.Fatal(err)
	}
	if _, err := o.conn.Exec(ctx, `INSERT INTO twice_workflow_tasks (workflow_id, name, pending, state, kind, queue, args, max_attempts)
		VALUES ($1, 'a', 0, 'enqueued', 'k.v1', 'default', '\x7b7d', 3), ($1, 'b', 1, 'waiting', 'k.v1', 'default', '\x7b7d', 3)`, wf); err != nil {
		t.Fatal(err)
	}
	if _, err := o.conn.Exec(ctx, `INSERT INTO twice_workflow_deps (workflow_id, dep, task) VALUES ($1, 'a', 'b')`, wf); err != nil {
		t.Fatal(err)
	}
	if err := o.conn.QueryRow(ctx, `INSERT INTO twice_jobs (kind, queue, args, max_attempts, run_at, created_at, workflow_id, workflow_task)
		VALUES ('k.v1', 'default', '\x7b7d', 3, now(), now(), $1, 'a') RETURNING id`, wf).Scan(&a); err != nil {
		t.Fatal(err)
	}
	return wf, a
}
