package mysqltest

import (
	"net/url"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
)

// URL is Database as a mysql:// URL, the form the CLI's --db takes:
// mysql://user:pass@host:3306/db?parseTime=true.
func URL(t testing.TB, prefix string) (dbURL, name string) {
	t.Helper()
	dsn, name := Database(t, prefix)
	return ToURL(t, dsn), name
}

// ToURL turns a DSN in go-sql-driver's form into a mysql:// URL with the
// same user, password, address, database and parameters.
func ToURL(t testing.TB, dsn string) string {
	t.Helper()
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatalf("DSN: %v", err)
	}
	u := url.URL{Scheme: "mysql", Host: cfg.Addr, Path: "/" + cfg.DBName}
	if cfg.Passwd != "" {
		u.User = url.UserPassword(cfg.User, cfg.Passwd)
	} else if cfg.User != "" {
		u.User = url.User(cfg.User)
	}
	// FormatDSN writes the parameters query-escaped, as a URL takes them.
	if _, params, ok := strings.Cut(cfg.FormatDSN(), "?"); ok {
		u.RawQuery = params
	}
	return u.String()
}
