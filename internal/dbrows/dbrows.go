// Package dbrows names the cursor the PostgreSQL driver reads every query
// through, whether pgx or database/sql runs it underneath, so that one
// linter can check each loop over one. .golangci.yml lists this package
// for rowserrcheck: a function that reads a Rows and never calls its Err
// would miss an error that ends the result early (a dropped connection, a
// query cancelled mid-result) and act on the rows it saw, as if they were
// all.
package dbrows

// Rows is a query's result read row by row. A loop over it ends when Next
// returns false, for the last row or for an error: Err tells which.
type Rows interface {
	Scan(dest ...any) error
	Next() bool
	Err() error
	Close()
}
