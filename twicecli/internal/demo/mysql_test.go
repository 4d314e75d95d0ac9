package demo

import (
	"strings"
	"testing"

	"github.com/twicejobs/twice/internal/testkit/mysqltest"
)

// mysqlURL returns a mysql:// URL of a database of the test's own (see
// mysqltest).
func mysqlURL(t *testing.T) string {
	u, _ := mysqltest.URL(t, "twice_demo")
	return u
}

func TestRunOnceConvergesOnMySQL(t *testing.T) {
	t.Parallel()
	convergesTwiceOn(t, mysqlURL(t))
}

// TestCheckerCatchesDivergenceOnMySQL: the checker can fail on MySQL too;
// a credit applied twice is caught.
func TestCheckerCatchesDivergenceOnMySQL(t *testing.T) {
	t.Parallel()
	catchesCreditAppliedTwiceOn(t, mysqlURL(t))
}

// TestOpenRefusesABadMySQLURL: the URL is checked before connecting, with
// the driver's message, which never repeats the password.
func TestOpenRefusesABadMySQLURL(t *testing.T) {
	t.Parallel()
	for url, want := range map[string]string{
		"mysql://app:s3cret@127.0.0.1:1/app":                            "parseTime=true",
		"mysql://app:s3cret@127.0.0.1:1/?parseTime=true":                "names no database",
		"mariadb://app:s3cret@127.0.0.1:1/app?loc=Local&parseTime=true": "loc=Local",
	} {
		_, err := Open(t.Context(), url, t.TempDir())
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Open(%s) = %v, want an error saying %q without the password", url, err, want)
		}
	}
}

func TestDisplayDBHidesTheMySQLPassword(t *testing.T) {
	t.Parallel()
	got := displayDB("mysql://app:s3cret@db.internal:3306/app?parseTime=true")
	if strings.Contains(got, "s3cret") || !strings.Contains(got, "db.internal") {
		t.Errorf("displayDB = %q", got)
	}
	if dir := DefaultObjectsDir("mysql://app@db.internal:3306/app?parseTime=true"); strings.Contains(dir, "db.internal") {
		t.Errorf("DefaultObjectsDir of a URL = %q, want a directory named by its hash", dir)
	}
}
