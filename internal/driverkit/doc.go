// Package driverkit is what the SQL drivers (twicesqlite, twicepg) share
// beyond their SQL: the read models they assemble from rows (a workflow's
// tasks and edges, job counts), the decoding of a job row's JSON columns,
// the rules both apply the same way (the catalog's sensitive-field merge,
// when a finish earns its children, how many jobs a limit holds back,
// which finished jobs retention deletes), and the unique index's
// predicate. Each driver keeps its own SQL and dialect; what is written
// here is written once, so the drivers cannot drift apart.
package driverkit
