package twicetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"
)

// freshSchema creates a schema of its own in the database base names,
// drops it when the test ends, and returns base with search_path set to
// it.
func freshSchema(t testing.TB, base string) string {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("twicetest: Case.PostgresURL: %v", err)
	}
	suffix := make([]byte, 6)
	_, _ = rand.Read(suffix)
	schema := "twicetest_" + hex.EncodeToString(suffix)
	exec := func(sql string) error {
		conn, err := pgx.Connect(context.Background(), base)
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		_, err = conn.Exec(context.Background(), sql)
		return err
	}
	if err := exec(`CREATE SCHEMA ` + schema); err != nil {
		t.Fatalf("twicetest: create a schema in Case.PostgresURL's database: %v", err)
	}
	t.Cleanup(func() { _ = exec(`DROP SCHEMA ` + schema + ` CASCADE`) })
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}
