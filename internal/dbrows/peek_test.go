package dbrows_test

import (
	"database/sql"
	"testing"

	_ "modernc.org/sqlite"

	"github.com/twicejobs/twice/internal/dbrows"
)

// TestPeek: a peeked result hands over every row, the first included,
// and the error that ended it after its first row to its reader.
func TestPeek(t *testing.T) {
	db, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	read := func(query string) ([]int64, error) {
		t.Helper()
		rs, err := db.QueryContext(t.Context(), query) //nolint:rowserrcheck // Collect reads Err
		if err != nil {
			t.Fatal(err)
		}
		p, err := dbrows.Peek(rs) //nolint:rowserrcheck // Collect reads Err
		if err != nil {
			t.Fatalf("Peek(%s): %v", query, err)
		}
		return dbrows.Collect(p, dbrows.One[int64])
	}
	if got, err := read(`SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3`); err != nil || len(got) != 3 || got[0] != 1 || got[2] != 3 {
		t.Errorf("three rows peeked: %v, %v", got, err)
	}
	if got, err := read(`SELECT 1 WHERE 0`); err != nil || len(got) != 0 {
		t.Errorf("no row peeked: %v, %v", got, err)
	}
	if got, err := read(`SELECT 1 UNION ALL SELECT abs(-9223372036854775807 - 1)`); err == nil {
		t.Errorf("a result that fails after its first row: read %v and no error", got)
	}
}
