package main

import (
	"context"
	"flag"
	"fmt"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"
)

// pgWrites is -pgwrites: what a run wrote on the server, per job — WAL
// bytes, and for each table of the system's schema its inserts, updates
// (and how many were HOT: a HOT update writes no index entry), deletes and
// indexes, from which the index entries written follow. It is the figure
// issue 23's "a hot path that writes less" is measured by.
type pgWrites struct {
	on bool
}

func (w *pgWrites) flags() {
	flag.BoolVar(&w.on, "pgwrites", false, "print, per run, the WAL bytes and each table's inserts, updates (HOT or not), deletes and index entries written, per job (the server's statistics: other clients' writes count too)")
}

// tableWrites is one table's write counters.
type tableWrites struct {
	ins, upd, hot, del int64
	indexes            int64
}

// writeSnapshot is the server's write counters at one moment.
type writeSnapshot struct {
	wal    int64
	tables map[string]tableWrites
}

// snapshotWrites reads the WAL position and the tables of schema.
func snapshotWrites(ctx context.Context, pg, schema string) (*writeSnapshot, error) {
	conn, err := pgx.Connect(ctx, pg)
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close(ctx) }()
	s := &writeSnapshot{tables: map[string]tableWrites{}}
	if err := conn.QueryRow(ctx, `SELECT pg_current_wal_lsn() - '0/0'::pg_lsn`).Scan(&s.wal); err != nil {
		return nil, err
	}
	rows, err := conn.Query(ctx, `SELECT t.relname, t.n_tup_ins, t.n_tup_upd, t.n_tup_hot_upd, t.n_tup_del,
			(SELECT count(*) FROM pg_index AS i WHERE i.indrelid = t.relid)
		FROM pg_stat_user_tables AS t WHERE t.schemaname = $1`, schema)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var tw tableWrites
		if err := rows.Scan(&name, &tw.ins, &tw.upd, &tw.hot, &tw.del, &tw.indexes); err != nil {
			return nil, err
		}
		s.tables[name] = tw
	}
	return s, rows.Err()
}

// report prints what was written between before and after, per job of a
// run of jobs: WAL bytes, then each table that was written, with its
// index entries (an insert and a non-HOT update write one per index whose
// predicate the row meets: counted here as one per index, an upper bound
// for partial indexes).
func (w *pgWrites) report(before, after *writeSnapshot, jobs int) {
	if jobs <= 0 {
		return
	}
	per := func(n int64) float64 { return float64(n) / float64(jobs) }
	var lines []string
	var entries int64
	names := make([]string, 0, len(after.tables))
	for name := range after.tables {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		a, b := after.tables[name], before.tables[name]
		ins, upd, hot, del := a.ins-b.ins, a.upd-b.upd, a.hot-b.hot, a.del-b.del
		if ins+upd+del == 0 {
			continue
		}
		idx := (ins + upd - hot) * a.indexes
		entries += idx
		lines = append(lines, fmt.Sprintf("    %-24s ins %.2f upd %.2f (HOT %.2f) del %.2f; %d indexes: ≤ %.2f index entries",
			name, per(ins), per(upd), per(hot), per(del), a.indexes, per(idx)))
	}
	fmt.Printf("  -pgwrites per job: WAL %.0f bytes, ≤ %.2f index entries\n", per(after.wal-before.wal), per(entries))
	fmt.Println(strings.Join(lines, "\n"))
}
