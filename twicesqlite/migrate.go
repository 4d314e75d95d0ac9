package twicesqlite

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"time"

	"github.com/twicejobs/twice/internal/migrations"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// embedded lists the embedded migrations in version order.
var embedded = migrations.MustLoad("twicesqlite", migrationFS, "migrations")

func latestVersion() int { return len(embedded) }

const createMigrationsTable = `
CREATE TABLE IF NOT EXISTS twice_migrations (
    version    INTEGER NOT NULL PRIMARY KEY,
    name       TEXT    NOT NULL,
    applied_at INTEGER NOT NULL
)`

// Migrate applies the embedded migrations that are not applied yet, all in
// one transaction. Concurrent calls, from this process or another, queue on
// SQLite's write lock and the later ones find nothing left to do. It returns
// an error wrapping twicestore.ErrSchemaTooNew, and changes nothing, when the
// database was migrated by a newer twice.
func (s *Store) Migrate(ctx context.Context) error {
	// A dedicated connection with an explicit BEGIN IMMEDIATE takes the write
	// lock before reading the version, whatever _txlock the caller of New
	// chose, so two migrators cannot both decide to apply the same step.
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer func() { _ = conn.Close() }() // back to the pool; nothing to lose
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if err := migrateLocked(ctx, conn); err != nil {
		// A rollback failure says nothing the first error does not.
		_, _ = conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
		return err
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		_, _ = conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
		return fmt.Errorf("migrate: commit: %w", err)
	}
	return nil
}

// migrateLocked applies the missing migrations on conn, in the
// transaction Migrate began.
func migrateLocked(ctx context.Context, conn *sql.Conn) error {
	return migrations.Run(embedded, migrations.Steps{
		Applied: func() (int, error) { return appliedVersion(ctx, conn) },
		CreateTable: func() error {
			_, err := conn.ExecContext(ctx, createMigrationsTable)
			return err
		},
		Apply: func(m migrations.Migration) error {
			_, err := conn.ExecContext(ctx, m.SQL)
			return err
		},
		Record: func(m migrations.Migration) error {
			_, err := conn.ExecContext(ctx, `INSERT INTO twice_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
				m.Version, m.Name, time.Now().UnixMicro())
			return err
		},
	})
}

// SchemaVersion reports the highest migration applied to the database (0
// when it has none) and the highest this binary embeds.
func (s *Store) SchemaVersion(ctx context.Context) (applied, latest int, err error) {
	applied, err = appliedVersion(ctx, s.db)
	return applied, latestVersion(), err
}

func appliedVersion(ctx context.Context, q interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}) (int, error) {
	var exists bool
	err := q.QueryRowContext(ctx,
		`SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'twice_migrations')`,
	).Scan(&exists)
	if err != nil {
		return 0, fmt.Errorf("read schema version: %w", openError(err))
	}
	if !exists {
		return 0, nil
	}
	var v int
	if err := q.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM twice_migrations`).Scan(&v); err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	return v, nil
}
