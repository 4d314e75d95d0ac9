package twicemysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
)

// Supported server versions: below them, SKIP LOCKED (MySQL 8.0,
// MariaDB 10.6) or the JSON functions twice's queries use are missing.
const (
	minMySQL   = "8.0.1"
	minMariaDB = "10.6.0"
)

// ParseDSN reads a data source name in go-sql-driver/mysql's form
// (user:pass@tcp(host:3306)/db?parseTime=true) or as a URL
// (mysql://user:pass@host:3306/db?parseTime=true, as the CLI's --db takes
// it), and checks it with CheckDSN. It sets interpolateParams=true when
// the DSN does not set it: each statement then takes one round trip, not
// three.
func ParseDSN(dsn string) (*mysql.Config, error) {
	native, err := nativeDSN(dsn)
	if err != nil {
		return nil, err
	}
	cfg, err := mysql.ParseDSN(native)
	if err != nil {
		return nil, fmt.Errorf("DSN: %w", err)
	}
	if !strings.Contains(native, "interpolateParams=") {
		cfg.InterpolateParams = true
	}
	if err := CheckDSN(cfg); err != nil {
		return nil, err
	}
	return cfg, nil
}

// nativeDSN turns a mysql:// or mariadb:// URL into go-sql-driver's form,
// and returns any other string as it is.
func nativeDSN(dsn string) (string, error) {
	scheme, rest, ok := strings.Cut(dsn, "://")
	if !ok {
		return dsn, nil
	}
	if scheme != "mysql" && scheme != "mariadb" {
		return "", fmt.Errorf("DSN scheme %q: use mysql://user:pass@host:3306/db?parseTime=true", scheme)
	}
	u, err := url.Parse("mysql://" + rest)
	if err != nil {
		// url.Error quotes the whole URL, password included: keep its cause.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return "", fmt.Errorf("DSN: %w", err)
	}
	host := u.Host
	if host == "" {
		host = "127.0.0.1:3306"
	} else if u.Port() == "" {
		host += ":3306"
	}
	db := strings.TrimPrefix(u.Path, "/")
	if db == "" {
		return "", errors.New("DSN names no database: add it after the host, mysql://user@host:3306/DB?parseTime=true")
	}
	var auth string
	if u.User != nil {
		auth = u.User.Username()
		if pw, ok := u.User.Password(); ok {
			auth += ":" + pw
		}
		auth += "@"
	}
	native := auth + "tcp(" + host + ")/" + db
	if u.RawQuery != "" {
		native += "?" + u.RawQuery
	}
	return native, nil
}

// CheckDSN refuses connection settings that would break twice's promises,
// saying what to change:
//
//   - parseTime must be true: twice reads its DATETIME(6) columns as
//     time.Time;
//   - loc must be UTC (its default): twice stores times in UTC, and a
//     DATETIME keeps no zone;
//   - the DSN must name a database;
//   - a transaction_isolation (or tx_isolation) system variable set in the
//     DSN must not be READ-UNCOMMITTED, which would let a worker act on a
//     lease another has not committed;
//   - a sql_mode set in the DSN must keep STRICT_TRANS_TABLES or
//     STRICT_ALL_TABLES, without which MySQL cuts an over-long value short
//     and stores it, instead of refusing it.
func CheckDSN(cfg *mysql.Config) error {
	if !cfg.ParseTime {
		return errors.New("DSN lacks parseTime=true: add it (twice reads its times as time.Time)")
	}
	if cfg.Loc != nil && cfg.Loc != time.UTC && cfg.Loc.String() != "UTC" {
		return fmt.Errorf("DSN sets loc=%s: twice stores times in UTC; remove loc or set loc=UTC", cfg.Loc)
	}
	if cfg.DBName == "" {
		return errors.New("DSN names no database: add it after the address, user@tcp(host:3306)/DB?parseTime=true")
	}
	for name, value := range cfg.Params {
		v := strings.Trim(strings.ToUpper(value), "'\"")
		switch strings.ToLower(name) {
		case "transaction_isolation", "tx_isolation":
			if err := checkIsolation(v); err != nil {
				return fmt.Errorf("DSN: %w", err)
			}
		case "sql_mode":
			if err := checkSQLMode(v); err != nil {
				return fmt.Errorf("DSN: %w", err)
			}
		}
	}
	return nil
}

func checkIsolation(level string) error {
	if strings.ReplaceAll(level, " ", "-") == "READ-UNCOMMITTED" {
		return errors.New("transaction isolation READ-UNCOMMITTED would let a worker read another's uncommitted lease: use READ-COMMITTED or REPEATABLE-READ")
	}
	return nil
}

func checkSQLMode(mode string) error {
	for m := range strings.SplitSeq(mode, ",") {
		if m = strings.TrimSpace(m); m == "STRICT_TRANS_TABLES" || m == "STRICT_ALL_TABLES" || m == "TRADITIONAL" {
			return nil
		}
	}
	return fmt.Errorf("sql_mode %q is not strict, so an over-long value would be cut short and stored: add STRICT_TRANS_TABLES", mode)
}

// checkServer refuses a server or a session twice cannot keep its promises
// on: a version below the supported ones, a session isolation of READ
// UNCOMMITTED, a sql_mode that is not strict, or a database whose
// character set is not utf8mb4 (its tables are created in the database's
// defaults, and utf8 of three bytes cannot hold every text a job carries).
// It also reads a DATETIME back, which catches a pool New was given that
// lacks parseTime=true or sets a loc other than UTC: New never sees the
// DSN, only what the connections do.
// serverSettings is what checkServer read of the server and the session.
type serverSettings struct {
	// isolationVar is the name of the session's isolation variable:
	// transaction_isolation (MySQL 8, MariaDB 11.1+) or tx_isolation.
	isolationVar string
	// isolation is its value, upper-cased: READ-COMMITTED, REPEATABLE-READ...
	isolation string
}

func checkServer(ctx context.Context, db *sql.DB) (serverSettings, error) {
	var (
		version, isolation, mode, charset string
		probe                             any
	)
	set := serverSettings{isolationVar: "transaction_isolation"}
	err := db.QueryRowContext(ctx,
		`SELECT VERSION(), @@SESSION.transaction_isolation, @@SESSION.sql_mode, @@character_set_database, CAST('2000-01-01 00:00:00' AS DATETIME(6))`,
	).Scan(&version, &isolation, &mode, &charset, &probe)
	if err != nil {
		// MariaDB before 11.1 and old MySQL name the variable tx_isolation.
		set.isolationVar = "tx_isolation"
		err = db.QueryRowContext(ctx,
			`SELECT VERSION(), @@SESSION.tx_isolation, @@SESSION.sql_mode, @@character_set_database, CAST('2000-01-01 00:00:00' AS DATETIME(6))`,
		).Scan(&version, &isolation, &mode, &charset, &probe)
	}
	if err != nil {
		return set, fmt.Errorf("read the server's version and settings: %w", err)
	}
	switch t, ok := probe.(time.Time); {
	case !ok:
		return set, errors.New("the connections read a DATETIME as text: open the database with parseTime=true in its DSN (twice reads its times as time.Time)")
	case t.Location() != time.UTC:
		return set, fmt.Errorf("the connections read times in %s: twice stores times in UTC; remove loc from the DSN or set loc=UTC", t.Location())
	}
	if err := checkVersion(version); err != nil {
		return set, err
	}
	if err := checkIsolation(strings.ToUpper(isolation)); err != nil {
		return set, fmt.Errorf("the session's %w", err)
	}
	if err := checkSQLMode(strings.ToUpper(mode)); err != nil {
		return set, fmt.Errorf("the session's %w (set it in the DSN: sql_mode='STRICT_TRANS_TABLES,NO_ENGINE_SUBSTITUTION', or on the server)", err)
	}
	set.isolation = strings.ToUpper(isolation)
	if charset != "utf8mb4" {
		return set, fmt.Errorf("the database's character set is %s: twice needs utf8mb4 (ALTER DATABASE <name> CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)", charset)
	}
	return set, nil
}

// checkVersion refuses a server below minMySQL or minMariaDB. version is
// SELECT VERSION()'s text: 8.0.36, or 10.11.19-MariaDB-0+deb12u1.
func checkVersion(version string) error {
	minimum, product := minMySQL, "MySQL"
	if strings.Contains(strings.ToLower(version), "mariadb") {
		minimum, product = minMariaDB, "MariaDB"
	}
	if compareVersions(version, minimum) < 0 {
		return fmt.Errorf("server is %s %s: twice needs %s %s or later (for SKIP LOCKED)", product, version, product, minimum)
	}
	return nil
}

// compareVersions compares the leading dotted numbers of two versions.
func compareVersions(a, b string) int {
	pa, pb := versionParts(a), versionParts(b)
	for i := range 3 {
		if pa[i] != pb[i] {
			if pa[i] < pb[i] {
				return -1
			}
			return 1
		}
	}
	return 0
}

func versionParts(v string) [3]int {
	var parts [3]int
	for i, f := range strings.SplitN(v, ".", 3) {
		end := strings.IndexFunc(f, func(r rune) bool { return r < '0' || r > '9' })
		if end >= 0 {
			f = f[:end]
		}
		parts[i], _ = strconv.Atoi(f)
	}
	return parts
}

// redacted names the server and database of cfg for a message, without
// the password.
func redacted(cfg *mysql.Config) string {
	return fmt.Sprintf("%s@%s/%s", cfg.User, cfg.Addr, cfg.DBName)
}
