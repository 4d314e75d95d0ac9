package storetest

import (
	"sync"
	"testing"
)

var schemaTests = []test{
	{"AppliedIsLatest", testSchemaVersion},
	{"MigrateIsIdempotent", testMigrateTwice},
	{"ConcurrentMigrate", testMigrateConcurrent},
	{"Ping", testPing},
}

func (e *env) checkVersion() {
	e.t.Helper()
	applied, latest, err := e.s.SchemaVersion(e.ctx)
	if err != nil {
		e.t.Fatalf("SchemaVersion: %v", err)
	}
	if latest < 1 || applied != latest {
		e.t.Fatalf("SchemaVersion = %d applied, %d latest; want equal and at least 1", applied, latest)
	}
}

func testSchemaVersion(_ *testing.T, e *env) {
	e.checkVersion()
}

func testMigrateTwice(t *testing.T, e *env) {
	j := e.insertOne(e.job("storetest.migrate.v1"))
	for range 2 {
		if err := e.s.Migrate(e.ctx); err != nil {
			t.Fatalf("Migrate on a migrated store: %v", err)
		}
	}
	e.checkVersion()
	checkJob(t, "job after migrating again", e.get(j.ID), j)
}

func testMigrateConcurrent(t *testing.T, e *env) {
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if err := e.s.Migrate(e.ctx); err != nil {
				t.Errorf("concurrent Migrate: %v", err)
			}
		})
	}
	wg.Wait()
	e.checkVersion()
}

func testPing(t *testing.T, e *env) {
	if err := e.s.Ping(e.ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
}
