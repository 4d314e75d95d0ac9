// Package driverkit is what the SQL drivers (twicesqlite, twicepg,
// twicemysql) share beyond their SQL: the readers of their rows (jobs,
// workflows, batches, signals, steps, toggles, schedules, nodes, queues,
// the kind catalog, limit overrides, idempotency records), generic over
// how a driver stores times (Times: NativeTimes for time columns,
// MicrosTimes for unix microseconds); the read models they assemble from
// rows (a workflow's tasks and edges, job counts); the decoding of a job
// row's JSON columns; the rules they apply the same way (the catalog's
// sensitive-field merge, when a finish earns its children, how many jobs
// a limit holds back, which finished jobs retention deletes); and the
// unique index's predicate. Each driver keeps its own SQL and dialect;
// what is written here is written once, so the drivers cannot drift
// apart.
package driverkit
