// Package clustertest proves twice's promises with real worker processes on
// a real database server: the test binary starts copies of itself as
// workers, kills them with SIGKILL mid-run, cuts their connections, and
// checks that no job is lost, none is completed twice, and every effect
// converged as its strategy promises. Each test runs once per backend
// (backend_test.go): on PostgreSQL (TWICE_TEST_POSTGRES) and on MariaDB or
// MySQL (TWICE_TEST_MYSQL), the same kinds and the same checks; a backend
// whose variable is unset skips. TestClusterSurvivesMariaDBRestart builds
// a MariaDB server of its own and crashes it mid-run. The package has no
// code outside its tests.
package clustertest
