// Package mysqltest gives a test a MySQL or MariaDB database of its own on
// the server that TWICE_TEST_MYSQL names, so tests on one server run in
// parallel without seeing each other's jobs. It is imported by tests.
package mysqltest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"os"
	"testing"

	"github.com/go-sql-driver/mysql"
)

// EnvDSN is the environment variable naming the test server, in
// go-sql-driver's form, for example
// root@tcp(127.0.0.1:3306)/test?parseTime=true.
const EnvDSN = "TWICE_TEST_MYSQL"

// Database creates a database named prefix plus a random suffix, in
// utf8mb4, drops it when the test ends, and returns the server's DSN with
// that database. It skips the test when EnvDSN is unset, and fails it
// when the variable is set but the server cannot be reached: CI sets it,
// and must never pass by skipping.
func Database(t testing.TB, prefix string) (dsn, name string) {
	t.Helper()
	base := os.Getenv(EnvDSN)
	if base == "" {
		t.Skip(EnvDSN + " is not set; .ci/run sets it to the local MariaDB server")
	}
	return DatabaseIn(t, base, prefix)
}

// DatabaseIn is Database on the server base names, whatever the
// environment says.
func DatabaseIn(t testing.TB, base, prefix string) (dsn, name string) {
	t.Helper()
	cfg, err := mysql.ParseDSN(base)
	if err != nil {
		t.Fatalf("%s: %v", EnvDSN, err)
	}
	suffix := make([]byte, 6)
	_, _ = rand.Read(suffix)
	name = prefix + "_" + hex.EncodeToString(suffix)
	admin := cfg.Clone()
	admin.DBName = ""
	db, err := sql.Open("mysql", admin.FormatDSN())
	if err != nil {
		t.Fatalf("MySQL at %s: %v", admin.Addr, err)
	}
	defer func() { _ = db.Close() }() // the test checked what it needed
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, "CREATE DATABASE `"+name+"` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"); err != nil {
		t.Fatalf("MySQL at %s is unreachable or refuses to create a database: %v", admin.Addr, err)
	}
	t.Cleanup(func() {
		d, err := sql.Open("mysql", admin.FormatDSN())
		if err != nil {
			return
		}
		defer func() { _ = d.Close() }() // a cleanup: nothing left to report to
		_, _ = d.ExecContext(context.Background(), "DROP DATABASE IF EXISTS `"+name+"`")
	})
	mine := cfg.Clone()
	mine.DBName = name
	mine.ParseTime = true
	return mine.FormatDSN(), name
}
