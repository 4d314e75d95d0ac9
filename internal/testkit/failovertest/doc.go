// Package failovertest proves what twice promises across a PostgreSQL
// primary failover: the test builds a primary and a streaming standby of its
// own with the PostgreSQL binaries (initdb, pg_basebackup, pg_ctl), runs
// worker processes given a multi-host URL with target_session_attrs=read-write,
// kills the primary with `pg_ctl stop -m immediate` mid-run and promotes the
// standby. With synchronous replication no acknowledged job may be lost; with
// asynchronous replication (an opt-in run) it counts what was lost. It has no
// code outside its tests.
package failovertest
