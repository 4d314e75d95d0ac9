package twicemysql_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"os"

	"github.com/go-sql-driver/mysql"

	"github.com/twicejobs/twice/internal/testkit/mysqltest"
)

// exampleDatabase creates a scratch utf8mb4 database on the server
// TWICE_TEST_MYSQL names and returns its DSN and a function dropping it:
// mysqltest.Database for an example, which has no *testing.T. The examples
// run only when the variable is set (see skipExamplesWithoutServer).
func exampleDatabase() (dsn string, drop func()) {
	cfg, err := mysql.ParseDSN(os.Getenv(mysqltest.EnvDSN))
	if err != nil {
		panic(err)
	}
	suffix := make([]byte, 6)
	_, _ = rand.Read(suffix)
	name := "twice_example_" + hex.EncodeToString(suffix)
	admin := cfg.Clone()
	admin.DBName = ""
	db, err := sql.Open("mysql", admin.FormatDSN())
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, "CREATE DATABASE `"+name+"` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"); err != nil {
		panic(err)
	}
	mine := cfg.Clone()
	mine.DBName, mine.ParseTime = name, true
	return mine.FormatDSN(), func() {
		_, _ = db.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+name+"`")
		_ = db.Close()
	}
}
