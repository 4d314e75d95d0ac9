// Package faultsql injects an error into a real database/sql driver's
// result: a query whose text starts with a given prefix returns its first
// row, then fails, as a connection lost mid-result would. Tests use it to
// prove a driver never takes a result an error cut short for the whole.
package faultsql

import (
	"context"
	"database/sql/driver"
	"strings"
)

// Connector returns connections of base whose queries starting with
// failQuery (leading space ignored) return one row, then err.
func Connector(base driver.Connector, failQuery string, err error) driver.Connector {
	return &connector{base: base, failQuery: failQuery, err: err}
}

type connector struct {
	base      driver.Connector
	failQuery string
	err       error
}

func (c *connector) Connect(ctx context.Context) (driver.Conn, error) {
	base, err := c.base.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &conn{Conn: base, c: c}, nil
}

func (c *connector) Driver() driver.Driver { return c.base.Driver() }

// conn runs every statement through Prepare (it offers database/sql no
// shortcut), so faulty queries can be told by their text.
type conn struct {
	driver.Conn
	c *connector
}

func (c *conn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	return c.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
}

// CheckNamedValue lets the driver take its own argument types (arrays on
// PostgreSQL), as it would without the wrapper.
func (c *conn) CheckNamedValue(v *driver.NamedValue) error {
	if nc, ok := c.Conn.(driver.NamedValueChecker); ok {
		return nc.CheckNamedValue(v)
	}
	return driver.ErrSkip
}

func (c *conn) Prepare(query string) (driver.Stmt, error) {
	st, err := c.Conn.Prepare(query)
	if err != nil || !strings.HasPrefix(strings.TrimSpace(query), c.c.failQuery) {
		return st, err
	}
	return stmt{Stmt: st, err: c.c.err}, nil
}

type stmt struct {
	driver.Stmt
	err error
}

func (s stmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	rs, err := s.Stmt.(driver.StmtQueryContext).QueryContext(ctx, args)
	if err != nil {
		return nil, err
	}
	return &rows{Rows: rs, err: s.err}, nil
}

// rows returns the first row, then err.
type rows struct {
	driver.Rows
	err  error
	read int
}

func (r *rows) Next(dest []driver.Value) error {
	if r.read == 1 {
		return r.err
	}
	r.read++
	return r.Rows.Next(dest)
}
