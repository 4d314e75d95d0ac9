package twicemysql

import (
	"database/sql"
	"database/sql/driver"
	"errors"
	"strings"
	"testing"

	"github.com/twicejobs/twice/internal/testkit/mysqltest"
)

// TestParseDSNRefuses: every setting that would break a promise of twice's
// is refused before any connection, with what to change, and never with
// the password.
func TestParseDSNRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ dsn, want string }{
		{"app:s3cret@tcp(db:3306)/app", "parseTime=true"},
		{"app:s3cret@tcp(db:3306)/app?parseTime=false", "parseTime=true"},
		{"mysql://app:s3cret@db:3306/app", "parseTime=true"},
		{"app:s3cret@tcp(db:3306)/app?parseTime=true&loc=Local", "loc=Local"},
		{"app:s3cret@tcp(db:3306)/app?parseTime=true&loc=Europe%2FParis", "loc=Europe/Paris"},
		{"mysql://app:s3cret@db:3306/app?parseTime=true&loc=America%2FNew_York", "set loc=UTC"},
		{"app:s3cret@tcp(db:3306)/?parseTime=true", "names no database"},
		{"mysql://app:s3cret@db:3306/?parseTime=true", "names no database"},
		{"mysql://app:s3cret@db:3306?parseTime=true", "names no database"},
		{"app:s3cret@tcp(db:3306)/app?parseTime=true&transaction_isolation=%27READ-UNCOMMITTED%27", "READ-UNCOMMITTED"},
		{"app:s3cret@tcp(db:3306)/app?parseTime=true&tx_isolation=READ-UNCOMMITTED", "READ-UNCOMMITTED"},
		{"mysql://app:s3cret@db:3306/app?parseTime=true&transaction_isolation=%27read-uncommitted%27", "READ-UNCOMMITTED"},
		{"app:s3cret@tcp(db:3306)/app?parseTime=true&sql_mode=%27%27", "STRICT_TRANS_TABLES"},
		{"app:s3cret@tcp(db:3306)/app?parseTime=true&sql_mode=%27NO_ENGINE_SUBSTITUTION%27", "is not strict"},
		{"mysql://app:s3cret@db:3306/app?parseTime=true&sql_mode=%27ANSI_QUOTES%27", "is not strict"},
		{"postgres://app:s3cret@db:5432/app", "use mysql://"},
		{"mysql://app:s3cret@db:port/app?parseTime=true", "port"},
		{"app:s3cret@tcp(db:3306)/app?parseTime=maybe", "maybe"},
	} {
		_, err := ParseDSN(tc.dsn)
		if err == nil {
			t.Errorf("ParseDSN(%q) accepted it, want an error saying %q", tc.dsn, tc.want)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseDSN(%q) = %v, want it to say %q", tc.dsn, err, tc.want)
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("ParseDSN(%q) = %v: the error repeats the password", tc.dsn, err)
		}
	}
}

// TestParseDSNReadsTheURLForm: a mysql:// or mariadb:// URL names the same
// connection as go-sql-driver's own form.
func TestParseDSNReadsTheURLForm(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		dsn                        string
		user, passwd, addr, dbName string
	}{
		{"app:s3cret@tcp(db.internal:3307)/jobs?parseTime=true", "app", "s3cret", "db.internal:3307", "jobs"},
		{"mysql://app:s3cret@db.internal:3307/jobs?parseTime=true", "app", "s3cret", "db.internal:3307", "jobs"},
		{"mariadb://app:s3cret@db.internal/jobs?parseTime=true", "app", "s3cret", "db.internal:3306", "jobs"},
		{"mysql://app@db.internal/jobs?parseTime=true", "app", "", "db.internal:3306", "jobs"},
		{"mysql:///jobs?parseTime=true", "", "", "127.0.0.1:3306", "jobs"},
		// A password with the characters a URL escapes.
		{"mysql://app:p%40ss%3Aw%2Frd@[::1]:3306/jobs?parseTime=true", "app", "p@ss:w/rd", "[::1]:3306", "jobs"},
	} {
		cfg, err := ParseDSN(tc.dsn)
		if err != nil {
			t.Errorf("ParseDSN(%q): %v", tc.dsn, err)
			continue
		}
		if cfg.User != tc.user || cfg.Passwd != tc.passwd || cfg.Addr != tc.addr || cfg.DBName != tc.dbName || cfg.Net != "tcp" {
			t.Errorf("ParseDSN(%q) = user %q passwd %q %s(%s)/%s, want user %q passwd %q tcp(%s)/%s", tc.dsn,
				cfg.User, cfg.Passwd, cfg.Net, cfg.Addr, cfg.DBName, tc.user, tc.passwd, tc.addr, tc.dbName)
		}
		if !cfg.ParseTime || !cfg.InterpolateParams {
			t.Errorf("ParseDSN(%q): parseTime %v interpolateParams %v, want both", tc.dsn, cfg.ParseTime, cfg.InterpolateParams)
		}
	}
}

// TestParseDSNKeepsWhatIsSafe: settings that keep twice's promises pass,
// and an explicit interpolateParams=false is respected.
func TestParseDSNKeepsWhatIsSafe(t *testing.T) {
	t.Parallel()
	for _, dsn := range []string{
		"app@tcp(db:3306)/app?parseTime=true&loc=UTC",
		"mysql://app@db/app?parseTime=true&transaction_isolation=%27READ-COMMITTED%27",
		"mysql://app@db/app?parseTime=true&tx_isolation=%27REPEATABLE-READ%27",
		"mysql://app@db/app?parseTime=true&sql_mode=%27STRICT_TRANS_TABLES,NO_ENGINE_SUBSTITUTION%27",
		"mysql://app@db/app?parseTime=true&sql_mode=TRADITIONAL",
		"mysql://app@db/app?parseTime=true&sql_mode=%27strict_all_tables%27",
	} {
		if _, err := ParseDSN(dsn); err != nil {
			t.Errorf("ParseDSN(%q): %v", dsn, err)
		}
	}
	cfg, err := ParseDSN("mysql://app@db/app?parseTime=true&interpolateParams=false")
	if err != nil || cfg.InterpolateParams {
		t.Errorf("interpolateParams=false: %v, InterpolateParams %v", err, cfg != nil && cfg.InterpolateParams)
	}
}

func TestCheckVersion(t *testing.T) {
	t.Parallel()
	for version, ok := range map[string]bool{
		"8.0.36":                     true,
		"8.4.3":                      true,
		"9.1.0":                      true,
		"8.0.0":                      false,
		"5.7.44-log":                 false,
		"10.11.19-MariaDB-0+deb12u1": true,
		"10.6.0-MariaDB":             true,
		"11.4.2-MariaDB":             true,
		"10.5.27-MariaDB":            false,
		"5.5.5-10.3.39-MariaDB":      false,
	} {
		err := checkVersion(version)
		if (err == nil) != ok {
			t.Errorf("checkVersion(%q) = %v, want accepted %v", version, err, ok)
		}
		if err != nil && !strings.Contains(err.Error(), "or later") {
			t.Errorf("checkVersion(%q) = %v: does not say what is needed", version, err)
		}
	}
}

// TestOpenRefusesWhatTheServerSays: what only the server knows is checked
// at open too: the database's character set, and, for a pool New is given
// (whose DSN Open never saw), the session's sql_mode and isolation and
// whether times come back as time.Time in UTC.
func TestOpenRefusesWhatTheServerSays(t *testing.T) {
	t.Parallel()
	ctx := t.Context()

	t.Run("latin1 database", func(t *testing.T) {
		t.Parallel()
		dsn, name := mysqltest.Database(t, "twice_latin1")
		admin, err := sql.Open("mysql", dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer admin.Close()
		if _, err := admin.ExecContext(ctx, "ALTER DATABASE `"+name+"` CHARACTER SET latin1 COLLATE latin1_swedish_ci"); err != nil {
			t.Fatal(err)
		}
		s, err := Open(ctx, dsn)
		if err == nil {
			_ = s.Close()
			t.Fatal("Open accepted a latin1 database")
		}
		for _, want := range []string{"character set is latin1", "utf8mb4", "ALTER DATABASE"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("Open on latin1: %v, want it to say %q", err, want)
			}
		}
		assertNoTables(t, dsn)
	})

	for _, tc := range []struct {
		name, params, want string
	}{
		{"session sql_mode empty", "sql_mode=%27%27", "the session's sql_mode"},
		{"session sql_mode not strict", "sql_mode=%27NO_ENGINE_SUBSTITUTION%27", "the session's sql_mode"},
		{"session read uncommitted", isolationVariable(t) + "=%27READ-UNCOMMITTED%27", "READ-UNCOMMITTED"},
		{"no parseTime", "parseTime=false", "parseTime=true"},
		{"loc not UTC", "loc=Europe%2FParis", "Europe/Paris"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dsn, _ := mysqltest.Database(t, "twice_refused")
			bad := dsn + "&" + tc.params
			// Open refuses the DSN before connecting.
			if s, err := Open(ctx, bad); err == nil {
				_ = s.Close()
				t.Errorf("Open accepted %s", tc.params)
			} else if !strings.Contains(err.Error(), "DSN") {
				t.Errorf("Open with %s: %v, want the DSN refused", tc.params, err)
			}
			// New, given a pool on that DSN, refuses what the server says.
			db, err := sql.Open("mysql", bad)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if _, err := New(ctx, db); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New with %s: %v, want it to say %q", tc.params, err, tc.want)
			}
			assertNoTables(t, dsn)
		})
	}

	t.Run("server down", func(t *testing.T) {
		t.Parallel()
		_, err := Open(ctx, "mysql://app:s3cret@127.0.0.1:1/app?parseTime=true&timeout=2s")
		if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Open on no server: %v, want an error naming the address, not the password", err)
		}
	})
}

// isolationVariable is the name of the session's isolation variable on the
// test server: transaction_isolation, or tx_isolation on MariaDB before
// 11.1.
func isolationVariable(t *testing.T) string {
	t.Helper()
	dsn, _ := mysqltest.Database(t, "twice_isolation")
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var level string
	if err := db.QueryRowContext(t.Context(), `SELECT @@SESSION.transaction_isolation`).Scan(&level); err != nil {
		return "tx_isolation"
	}
	return "transaction_isolation"
}

// assertNoTables checks that a refused open created nothing in the
// database dsn names.
func assertNoTables(t *testing.T, dsn string) {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRowContext(t.Context(), `SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE()`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("a refused open left %d tables", n)
	}
}

// TestNewRefusesAnotherDriver: New takes go-sql-driver/mysql's pools only.
func TestNewRefusesAnotherDriver(t *testing.T) {
	t.Parallel()
	if _, err := New(t.Context(), nil); err == nil {
		t.Error("New(nil) accepted it")
	}
	sql.Register("twicemysql-test-other", otherDriver{})
	db, err := sql.Open("twicemysql-test-other", "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := New(t.Context(), db); err == nil || !strings.Contains(err.Error(), "go-sql-driver/mysql") {
		t.Errorf("New on another driver: %v", err)
	}
}

// otherDriver is a database/sql driver that is not go-sql-driver/mysql.
type otherDriver struct{}

func (otherDriver) Open(string) (driver.Conn, error) { return nil, errors.New("not a real driver") }
