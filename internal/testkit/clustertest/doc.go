// Package clustertest proves twice's promises with real worker processes on
// a real PostgreSQL server: the test binary starts copies of itself as
// workers, kills them with SIGKILL mid-run, cuts their connections, and
// checks that no job is lost, none is completed twice, and every effect
// converged as its strategy promises. It has no code outside its tests.
package clustertest
