// Package enqueuecases is the one table of enqueue cases that the two
// enqueue paths run: Go's Client.EnqueueJSON (the root package's
// enqueue_conformance_test.go, on SQLite and PostgreSQL) and the SQL
// function twice_enqueue of PostgreSQL migration 019
// (twicepg/sqlenqueue_conformance_test.go). Each case is a kind, raw JSON
// args and the options both paths take (the keys of twice_enqueue's opts),
// and what must come of them: a job with the stored values a case names,
// or a refusal of a Class, which maps to the Go sentinel error
// (errors.Is) and to the SQLSTATE the SQL function raises.
//
// A case runs on both paths unless it says otherwise, and then it says
// why: GoOnly and SQLOnly name an input only one path can express (a Go
// option the SQL function does not take, a JSON option Go's typed
// EnqueueOpts cannot hold), SQLWant an outcome the SQL path legitimately
// gives instead, and KnownDifference a disagreement nobody has fixed yet.
// Catalog is what both runners publish to the kind catalog first, the
// same way on both sides, so both paths judge the args against the same
// published fields.
package enqueuecases
