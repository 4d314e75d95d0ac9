package twicemysql

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"strings"
	"time"

	"github.com/twicejobs/twice/internal/migrations"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// embedded lists the embedded migrations in version order.
var embedded = migrations.MustLoad("twicemysql", migrationFS, "migrations")

func latestVersion() int { return len(embedded) }

const createMigrationsTable = `
CREATE TABLE IF NOT EXISTS twice_migrations (
    version    INT          NOT NULL PRIMARY KEY,
    name       VARCHAR(255) NOT NULL,
    applied_at DATETIME(6)  NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`

// migrateLockWait is how long Migrate waits for another migrator.
const migrateLockWait = 60 * time.Second

// Migrate applies the embedded migrations that are not applied yet. MySQL
// commits each DDL statement on its own, so a migration cannot be one
// transaction: migrators take a named lock (GET_LOCK) for the database,
// so one applies while the others wait and then find nothing left to do,
// and each statement of a migration is written to run again harmlessly
// (CREATE TABLE IF NOT EXISTS, DROP TRIGGER IF EXISTS before CREATE
// TRIGGER), so a migration cut short by a crash completes on the next
// start. It returns an error wrapping twicestore.ErrSchemaTooNew, and
// changes nothing, when the database was migrated by a newer twice.
func (s *Store) Migrate(ctx context.Context) error {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer func() { _ = conn.Close() }() // back to the pool; nothing to lose
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, `SELECT GET_LOCK(LEFT(CONCAT('twice_migrate.', DATABASE()), 64), ?)`,
		int(migrateLockWait.Seconds())).Scan(&got); err != nil {
		return fmt.Errorf("migrate: take the migration lock: %w", err)
	}
	if got.Int64 != 1 {
		return fmt.Errorf("migrate: another migrator held the migration lock for %s: try again", migrateLockWait)
	}
	defer func() {
		_, _ = conn.ExecContext(context.WithoutCancel(ctx), `SELECT RELEASE_LOCK(LEFT(CONCAT('twice_migrate.', DATABASE()), 64))`)
	}()
	return migrateLocked(ctx, conn)
}

// migrateLocked applies the missing migrations on conn, the migration lock
// held, one statement at a time.
func migrateLocked(ctx context.Context, conn *sql.Conn) error {
	return migrations.Run(embedded, migrations.Steps{
		Applied: func() (int, error) { return appliedVersion(ctx, conn) },
		CreateTable: func() error {
			_, err := conn.ExecContext(ctx, createMigrationsTable)
			return err
		},
		Apply: func(m migrations.Migration) error {
			for i, stmt := range statements(m.SQL) {
				if _, err := conn.ExecContext(ctx, stmt); err != nil {
					return fmt.Errorf("statement %d: %w", i+1, err)
				}
			}
			return nil
		},
		Record: func(m migrations.Migration) error {
			_, err := conn.ExecContext(ctx, `INSERT INTO twice_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
				m.Version, m.Name, dbTime(time.Now()))
			return err
		},
	})
}

// statements splits a migration into the statements it runs one by one
// (go-sql-driver runs one statement per call without multiStatements): a
// statement ends at a line that starts in the first column and ends with
// a semicolon. The lines of a CREATE TABLE's columns and of a trigger's
// body are indented, so their semicolons do not end the statement.
func statements(sqlText string) []string {
	var out []string
	var cur strings.Builder
	for line := range strings.SplitSeq(sqlText, "\n") {
		if cur.Len() == 0 && (strings.TrimSpace(line) == "" || strings.HasPrefix(line, "--")) {
			continue
		}
		cur.WriteString(line)
		cur.WriteByte('\n')
		if line != "" && line[0] != ' ' && line[0] != '\t' && strings.HasSuffix(strings.TrimRight(line, " \t"), ";") {
			stmt := strings.TrimSuffix(strings.TrimSpace(cur.String()), ";")
			out = append(out, stmt)
			cur.Reset()
		}
	}
	if s := strings.TrimSpace(cur.String()); s != "" {
		out = append(out, s)
	}
	return out
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
	var v int
	err := q.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM twice_migrations`).Scan(&v)
	if isNoSuchTable(err) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	return v, nil
}
