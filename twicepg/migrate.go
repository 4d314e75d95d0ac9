package twicepg

import (
	"context"
	"embed"
	"fmt"
	"time"

	"github.com/twicejobs/twice/internal/migrations"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// embedded lists the embedded migrations in version order.
var embedded = migrations.MustLoad("twicepg", migrationFS, "migrations")

func latestVersion() int { return len(embedded) }

const createMigrationsTable = `
CREATE TABLE IF NOT EXISTS twice_migrations (
    version    integer     NOT NULL PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL
)`

// migrateLockSQL serialises migrators of one schema, in any process, until
// their transaction ends; migrators of other schemas do not wait. The lock
// is transaction-scoped, so a migrator that dies releases it with its
// connection and no session-level lock can leak into the pool.
const migrateLockSQL = `SELECT pg_advisory_xact_lock(hashtext('twice_migrate'), hashtext(current_schema()))`

// Migrate applies the embedded migrations that are not applied yet, all in
// one transaction, holding an advisory lock on the schema: concurrent
// callers, in this process or another, wait for it and then find nothing
// left to do. It returns an error wrapping twicestore.ErrSchemaTooNew, and
// changes nothing, when the database was migrated by a newer twice.
func (s *Store) Migrate(ctx context.Context) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	// After Commit, Rollback is a no-op; after a failure it says nothing
	// the first error does not.
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	q := pgxQuerier{tx}
	if _, err := currentSchema(ctx, q); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if _, err := q.exec(ctx, migrateLockSQL); err != nil {
		return fmt.Errorf("migrate: take the migration lock: %w", err)
	}
	err = migrations.Run(embedded, migrations.Steps{
		Applied: func() (int, error) { return appliedVersion(ctx, q) },
		CreateTable: func() error {
			_, err := q.exec(ctx, createMigrationsTable)
			return err
		},
		// Without arguments pgx sends the file with the simple protocol,
		// which runs all its statements.
		Apply: func(m migrations.Migration) error {
			_, err := q.exec(ctx, m.SQL)
			return err
		},
		Record: func(m migrations.Migration) error {
			_, err := q.exec(ctx, `INSERT INTO twice_migrations (version, name, applied_at) VALUES ($1, $2, $3)`,
				m.Version, m.Name, time.Now())
			return err
		},
	})
	if err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("migrate: commit: %w", err)
	}
	return nil
}

// SchemaVersion reports the highest migration applied to the current schema
// (0 when it has none) and the highest this binary embeds.
func (s *Store) SchemaVersion(ctx context.Context) (applied, latest int, err error) {
	applied, err = appliedVersion(ctx, s.q)
	return applied, latestVersion(), err
}

func appliedVersion(ctx context.Context, q querier) (int, error) {
	// Look in the current schema only: a twice_migrations table further down
	// the search_path belongs to another installation.
	var exists bool
	err := q.queryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_tables
		WHERE schemaname = current_schema() AND tablename = 'twice_migrations')`).Scan(&exists)
	if err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	if !exists {
		return 0, nil
	}
	var v int
	if err := q.queryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM twice_migrations`).Scan(&v); err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	return v, nil
}
