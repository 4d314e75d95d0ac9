package twicemysql

import (
	"flag"
	"fmt"
	"os"

	"github.com/twicejobs/twice/internal/testkit/mysqltest"
)

// skipExamplesWithoutServer adds the package's examples to -test.skip when
// TWICE_TEST_MYSQL is unset: they run against a server, and an example
// cannot skip itself as a test does (mysqltest.Database). CI sets the
// variable, so there they run, and fail when the server is unreachable.
func skipExamplesWithoutServer() {
	if os.Getenv(mysqltest.EnvDSN) != "" {
		return
	}
	flag.Parse()
	skip := "^Example"
	if f := flag.Lookup("test.skip"); f != nil && f.Value.String() != "" {
		skip = f.Value.String() + "|" + skip
	}
	if err := flag.Set("test.skip", skip); err != nil {
		panic(err)
	}
	fmt.Fprintf(os.Stderr, "twicemysql: %s is not set; the examples, which need a MySQL server, are skipped\n", mysqltest.EnvDSN)
}
