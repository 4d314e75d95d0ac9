package twicesqlite

import (
	"context"
	"database/sql"
	"errors"
	"sync"
)

// stmtCache keeps the statements a Store runs prepared, so that SQLite
// parses each one once per connection instead of once per call.
// modernc.org/sqlite parses the SQL of every ExecContext and QueryContext
// called on a *sql.DB or *sql.Tx; parsing was a fifth of the CPU of eight
// workers running Transactional jobs on one file (a CPU profile of
// TestStressEightWorkersOneFile), and twice's statements are long.
//
// Its methods are safe for concurrent use. A *sql.Stmt prepares itself
// again on each connection the pool hands it, so one per query is enough.
type stmtCache struct {
	db *sql.DB
	mu sync.Mutex
	// stmts maps a query to its statement; closed tells that Close ran
	// and nothing more is prepared.
	stmts  map[string]*sql.Stmt
	closed bool
}

// stmtCacheMax bounds the statements kept. twice's queries are constants
// but for a few built from a listing's filters; past this many, a query
// runs unprepared, as it would without the cache.
const stmtCacheMax = 512

func newStmtCache(db *sql.DB) *stmtCache {
	return &stmtCache{db: db, stmts: map[string]*sql.Stmt{}}
}

// get returns the statement of query, preparing it on first use, or nil
// when query should run unprepared: the cache is full or closed, or the
// prepare failed (running the query unprepared then reports the same
// error the usual way).
//
// A prepare takes a connection of the pool. inTx tells that the caller
// holds one already, in a transaction: then a query not prepared yet
// is prepared only when the pool has no limit on its connections (as
// Open's has not), since callers that hold every connection of a limited
// pool would each wait for another for ever. For the same reason the
// prepare runs without c.mu held: a caller waiting for a connection must
// not keep one that holds a connection from finding its statement.
func (c *stmtCache) get(ctx context.Context, query string, inTx bool) *sql.Stmt {
	c.mu.Lock()
	st, ok := c.stmts[query]
	full := c.closed || len(c.stmts) >= stmtCacheMax
	c.mu.Unlock()
	if ok {
		return st
	}
	if full || inTx && c.db.Stats().MaxOpenConnections > 0 {
		return nil
	}
	st, err := c.db.PrepareContext(ctx, query)
	if err != nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if kept, ok := c.stmts[query]; ok || c.closed || len(c.stmts) >= stmtCacheMax {
		// Another caller kept one meanwhile (this call uses it), or there
		// is no room now (this call runs unprepared): this one is not needed.
		_ = st.Close() // never used: nothing to lose
		return kept
	}
	c.stmts[query] = st
	return st
}

// Close closes every statement kept; later queries run unprepared.
func (c *stmtCache) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	var errs []error
	for q, st := range c.stmts {
		errs = append(errs, st.Close())
		delete(c.stmts, q)
	}
	return errors.Join(errs...)
}

// prepared is a dbtx that runs each query as its cached statement: on the
// pool, or inside tx, a transaction begun on the cache's pool.
type prepared struct {
	cache *stmtCache
	tx    *sql.Tx // nil on the pool
}

// raw is the *sql.DB or *sql.Tx underneath.
func (p *prepared) raw() dbtx {
	if p.tx != nil {
		return p.tx
	}
	return p.cache.db
}

// stmt returns the statement to run query with, or nil to run it
// unprepared. Inside a transaction it is the cached statement bound to
// it, which the transaction closes when it ends.
func (p *prepared) stmt(ctx context.Context, query string) *sql.Stmt {
	st := p.cache.get(ctx, query, p.tx != nil)
	if st == nil || p.tx == nil {
		return st
	}
	return p.tx.StmtContext(ctx, st)
}

func (p *prepared) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if st := p.stmt(ctx, query); st != nil {
		return st.ExecContext(ctx, args...)
	}
	return p.raw().ExecContext(ctx, query, args...)
}

func (p *prepared) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if st := p.stmt(ctx, query); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return p.raw().QueryContext(ctx, query, args...)
}

func (p *prepared) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if st := p.stmt(ctx, query); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return p.raw().QueryRowContext(ctx, query, args...)
}

// PrepareContext returns, inside a transaction, the cached statement bound
// to it: closing that leaves the cached one open. On the pool it prepares
// a statement of the caller's own, since the caller closes it.
func (p *prepared) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	if p.tx != nil {
		if st := p.stmt(ctx, query); st != nil {
			return st, nil
		}
	}
	return p.raw().PrepareContext(ctx, query)
}
