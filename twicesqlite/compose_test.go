package twicesqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"modernc.org/sqlite"

	"github.com/twicejobs/twice/internal/testkit/faultsql"
	"github.com/twicejobs/twice/twicestore"
)

var errInjected = errors.New("injected: connection lost mid-result")

// faultyExecutor returns an executor on a transaction of its own, on a
// connection of the real SQLite driver where queries starting with
// failQuery fail after their first row.
func faultyExecutor(t *testing.T, s *Store, path, failQuery string) twicestore.Executor {
	t.Helper()
	db := sql.OpenDB(faultsql.Connector(sqliteConnector{DSN(path)}, failQuery, errInjected))
	t.Cleanup(func() { _ = db.Close() })
	tx, err := db.BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback() })
	exec, err := s.ExecutorFromTx(tx)
	if err != nil {
		t.Fatal(err)
	}
	return exec
}

// sqliteConnector opens connections of the real SQLite driver.
type sqliteConnector struct{ dsn string }

func (c sqliteConnector) Connect(context.Context) (driver.Conn, error) {
	return (&sqlite.Driver{}).Open(c.dsn)
}
func (c sqliteConnector) Driver() driver.Driver { return &sqlite.Driver{} }

// insertWorkflow stores a workflow of four tasks, t1 and t2 after t0: each
// read of it has two rows or more (tasks, dependencies, the roots' jobs).
func insertWorkflow(t *testing.T, s twicestore.Executor) int64 {
	t.Helper()
	now := time.Now()
	tasks := make([]*twicestore.WorkflowTaskParams, 4)
	for i := range tasks {
		tasks[i] = &twicestore.WorkflowTaskParams{Name: fmt.Sprint("t", i), Job: &twicestore.JobInsertParams{
			Kind: "readerror.v1", Queue: "default", Args: []byte(`{}`), MaxAttempts: 3, RunAt: now, CreatedAt: now}}
		if i == 1 || i == 2 {
			tasks[i].Deps = []string{"t0"}
		}
	}
	w, err := s.WorkflowInsert(t.Context(), &twicestore.WorkflowInsertParams{Name: "w", Tasks: tasks, CreatedAt: now})
	if err != nil {
		t.Fatal(err)
	}
	return w.Workflow.ID
}

// TestWorkflowReadError: each read of WorkflowGet and WorkflowCancel fails
// after its first row (a fault injected below the real driver, on a
// connection of its own). Each call must fail with the read's error, never
// return (or act on) the rows it saw as if they were all: WorkflowCancel
// used to cancel the one job it had read and report success.
func TestWorkflowReadError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "twice.db")
	s, err := Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, q := range []string{
		"SELECT name, kind, pending, state FROM twice_workflow_tasks",
		"SELECT dep, task FROM twice_workflow_deps",
		"SELECT workflow_task,",
	} {
		t.Run("WorkflowGet/"+q, func(t *testing.T) {
			id := insertWorkflow(t, s)
			res, err := faultyExecutor(t, s, path, q).WorkflowGet(t.Context(), &twicestore.WorkflowGetParams{ID: id})
			if !errors.Is(err, errInjected) {
				t.Fatalf("WorkflowGet when a read failed after its first row: %v (result %+v); want the read's error", err, res)
			}
		})
	}
	t.Run("WorkflowCancel", func(t *testing.T) {
		id := insertWorkflow(t, s)
		exec := faultyExecutor(t, s, path, "SELECT id FROM twice_jobs WHERE workflow_id")
		res, err := exec.WorkflowCancel(t.Context(), &twicestore.WorkflowCancelParams{ID: id, Now: time.Now()})
		if !errors.Is(err, errInjected) {
			t.Fatalf("WorkflowCancel when reading its jobs failed after the first: %v (result %+v); want the read's error", err, res)
		}
	})
}
