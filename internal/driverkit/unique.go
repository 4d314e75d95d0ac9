package driverkit

import (
	"strconv"
	"strings"

	"github.com/twicejobs/twice/twicetype"
)

// UniqueHeldSQL renders the predicate of the unique index on (kind,
// unique_key) both drivers create (in their migration 014, and again with
// the waiting state: PostgreSQL's 025, SQLite's 019), for the jobs
// table (or alias) t, unqualified when t is empty: the row has a unique key, and the bit of its current
// state (twicetype.JobState.UniqueBit) is set in its unique_states. Rendered
// from twicetype's bits, it is the one place the drivers' queries take the
// mapping from. A query that looks up holders, or pins the index (SQLite's
// INDEXED BY), must use it word for word: SQLite uses a partial index only
// for a query whose WHERE repeats the index's terms.
func UniqueHeldSQL(t string) string {
	if t != "" {
		t += "."
	}
	var sb strings.Builder
	sb.WriteString(t + "unique_key <> '' AND (" + t + "unique_states & CASE " + t + "state")
	for _, s := range twicetype.AllJobStates {
		sb.WriteString(" WHEN '" + string(s) + "' THEN " + strconv.Itoa(int(s.UniqueBit())))
	}
	sb.WriteString(" ELSE 0 END) <> 0")
	return sb.String()
}
