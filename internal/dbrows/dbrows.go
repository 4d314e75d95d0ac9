// Package dbrows is the one place the drivers read a query's result row
// by row. Iter, Each and Collect close the result and hand over the error
// that ended it, so a read that an error cut short (a dropped connection,
// a query cancelled mid-result) is never taken for the whole result: the
// drivers write no loop over a result of their own. .golangci.yml lists
// this package for rowserrcheck, which checks the loops written here.
package dbrows

import (
	"io"
	"iter"
)

// Rows is a query's result read row by row: what pgx.Rows and *sql.Rows
// have in common. A loop over it ends when Next returns false, for the
// last row or for an error: Err tells which.
type Rows interface {
	Scanner
	Next() bool
	Err() error
}

// Scanner reads the columns of one row.
type Scanner interface {
	Scan(dest ...any) error
}

// Iter ranges over the rows of rows, and closes rows when the loop ends,
// however it ends. Each row comes with a nil error; an error that ended
// the result early comes last, alone, with a nil Scanner:
//
//	for row, err := range dbrows.Iter(rs) {
//		if err != nil {
//			return nil, err
//		}
//		...row.Scan(...)
//	}
//
// The loop's err is a variable the body must use (an unused one does not
// compile), so checking it cannot be forgotten the way rows.Err() could.
func Iter(rows Rows) iter.Seq2[Scanner, error] {
	return func(yield func(Scanner, error) bool) {
		defer closeRows(rows)
		for rows.Next() {
			if !yield(rows, nil) {
				return
			}
		}
		if err := rows.Err(); err != nil {
			yield(nil, err)
		}
	}
}

// Each calls fn for each row of rows, then closes rows. It returns fn's
// first error, which stops the read, or else the error that ended the
// result, if any.
func Each(rows Rows, fn func(Scanner) error) error {
	for row, err := range Iter(rows) {
		if err == nil {
			err = fn(row)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Collect returns each row of rows as scan reads it, and closes rows. On
// an error it returns none of them.
func Collect[T any](rows Rows, scan func(Scanner) (T, error)) ([]T, error) {
	var out []T
	err := Each(rows, func(s Scanner) error {
		v, err := scan(s)
		if err == nil {
			out = append(out, v)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// closeRows closes a result of either shape: pgx's Close returns nothing,
// database/sql's an error that Err already reported.
func closeRows(rows Rows) {
	switch r := rows.(type) {
	case io.Closer:
		_ = r.Close()
	case interface{ Close() }:
		r.Close()
	}
}

// One scans a row of one column: Collect(rows, One[int64]) reads a list
// of ids.
func One[T any](s Scanner) (T, error) {
	var v T
	err := s.Scan(&v)
	return v, err
}

// Pairs reads rows of two columns into a map from the first to the
// second, and closes rows. On an error it returns none of them.
func Pairs[K comparable, V any](rows Rows) (map[K]V, error) {
	out := map[K]V{}
	err := Each(rows, func(s Scanner) error {
		var (
			k K
			v V
		)
		if err := s.Scan(&k, &v); err != nil {
			return err
		}
		out[k] = v
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Peeked is a result whose first row Peek read already: its first Next
// hands that row over without reading. Close closes the result.
type Peeked struct {
	Rows
	pending bool
}

// Peek reads the first row of rows, so that a caller can see an error that
// ended the result before any row and run the statement again before
// anyone reads it. It returns the result with that row still to come, and
// the error that ended it when it ended before a row.
func Peek(rows Rows) (*Peeked, error) {
	if rows.Next() {
		return &Peeked{Rows: rows, pending: true}, nil
	}
	return &Peeked{Rows: rows}, rows.Err()
}

// Next moves to the next row, the one Peek read first.
func (p *Peeked) Next() bool {
	if p.pending {
		p.pending = false
		return true
	}
	return p.Rows.Next()
}

// Close closes the result.
func (p *Peeked) Close() { closeRows(p.Rows) }
