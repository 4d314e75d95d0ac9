package twicesqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"modernc.org/sqlite"

	"github.com/twicejobs/twice/twicestore"
)

// TestWorkflowCancelReadError: the read of a workflow's unfinished jobs
// fails after its first row (a fault injected below the real driver, on a
// connection of its own). WorkflowCancel used to take the rows it had
// read for all of them, cancel that one job and report success; it now
// fails, and its transaction cancels nothing.
func TestWorkflowCancelReadError(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "twice.db")
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Now()
	tasks := make([]*twicestore.WorkflowTaskParams, 3)
	for i := range tasks {
		tasks[i] = &twicestore.WorkflowTaskParams{Name: fmt.Sprint("t", i), Job: &twicestore.JobInsertParams{
			Kind: "cancel.readerror.v1", Queue: "default", Args: []byte(`{}`), MaxAttempts: 3, RunAt: now, CreatedAt: now}}
	}
	w, err := s.WorkflowInsert(ctx, &twicestore.WorkflowInsertParams{Name: "w", Tasks: tasks, CreatedAt: now})
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(&faultyConnector{dsn: DSN(path), failQuery: "SELECT id FROM twice_jobs WHERE workflow_id"})
	defer db.Close()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	exec, err := s.ExecutorFromTx(tx)
	if err != nil {
		t.Fatal(err)
	}
	res, err := exec.WorkflowCancel(ctx, &twicestore.WorkflowCancelParams{ID: w.Workflow.ID, Now: now})
	if !errors.Is(err, errInjected) {
		cancelled := 0
		if res != nil && res.Jobs != nil {
			cancelled = len(res.Jobs.IDs)
		}
		t.Fatalf("WorkflowCancel when reading its jobs failed after the first: %v, %d of 3 jobs cancelled; want the read's error",
			err, cancelled)
	}
}

var errInjected = errors.New("injected: connection lost mid-result")

// faultyConnector opens connections of the real SQLite driver whose
// queries starting with failQuery fail after their first row.
type faultyConnector struct {
	dsn       string
	failQuery string
}

func (c *faultyConnector) Connect(context.Context) (driver.Conn, error) {
	conn, err := (&sqlite.Driver{}).Open(c.dsn)
	if err != nil {
		return nil, err
	}
	return &faultyConn{Conn: conn, failQuery: c.failQuery}, nil
}

func (c *faultyConnector) Driver() driver.Driver { return &sqlite.Driver{} }

// faultyConn runs every statement through Prepare (it offers database/sql
// no shortcut), so faulty queries can be told by their text.
type faultyConn struct {
	driver.Conn
	failQuery string
}

func (c *faultyConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	return c.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
}

func (c *faultyConn) Prepare(query string) (driver.Stmt, error) {
	st, err := c.Conn.Prepare(query)
	if err != nil || !strings.HasPrefix(strings.TrimSpace(query), c.failQuery) {
		return st, err
	}
	return faultyStmt{st}, nil
}

type faultyStmt struct{ driver.Stmt }

func (s faultyStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	rs, err := s.Stmt.(driver.StmtQueryContext).QueryContext(ctx, args)
	if err != nil {
		return nil, err
	}
	return &faultyRows{Rows: rs}, nil
}

// faultyRows returns the first row, then errInjected.
type faultyRows struct {
	driver.Rows
	read int
}

func (r *faultyRows) Next(dest []driver.Value) error {
	if r.read == 1 {
		return errInjected
	}
	r.read++
	return r.Rows.Next(dest)
}
