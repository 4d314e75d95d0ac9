package failovertest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/twicejobs/twice/internal/testkit/pgtest"
)

// The PostgreSQL server binaries the test builds its servers with.
const (
	envPGBin     = "TWICE_TEST_PG_BIN" // overrides pgBinDefault
	pgBinDefault = "/usr/lib/postgresql/15/bin"
)

// pair is a primary and a streaming standby made for one test, in its
// temporary directory, on ports of their own, run by the postgres OS user
// when the test runs as root (initdb refuses root).
type pair struct {
	t       testing.TB
	bin     string
	root    string   // the servers' directory, postgres's
	asUser  []string // the command prefix that runs a command as postgres; empty when not root
	primary *server
	standby *server
}

// server is one PostgreSQL server of a pair.
type server struct {
	name string
	dir  string // its data directory
	port int
	log  string // its server log
}

// newPair builds and starts a primary and a standby streaming from it, and
// stops both when the test ends, passed or failed. With synchronous, the
// primary waits for the standby to flush every commit before it
// acknowledges it (synchronous_standby_names = '*', synchronous_commit = on);
// without, it acknowledges a commit once it is flushed locally
// (synchronous_commit = local) and the standby follows when it can.
//
// It skips the test when TWICE_TEST_POSTGRES is unset, like every PostgreSQL
// test, and fails it when it is set but the server binaries are missing: CI
// sets it, and must never pass by skipping.
//
// fsync is off on both servers to keep the test fast on a small machine:
// `pg_ctl stop -m immediate` kills the server's processes, not the
// machine, so what the operating system was handed survives it anyway, and
// what the test measures (what the standby had received when the primary
// died) does not depend on it.
func newPair(t testing.TB, synchronous bool) *pair {
	t.Helper()
	if os.Getenv(pgtest.EnvURL) == "" {
		t.Skip(pgtest.EnvURL + " is not set; .ci/run sets it, and this test then builds a primary and a standby of its own")
	}
	p := &pair{t: t, bin: pgBinDefault}
	if v := os.Getenv(envPGBin); v != "" {
		p.bin = v
	}
	for _, name := range []string{"initdb", "pg_ctl", "pg_basebackup", "postgres"} {
		if _, err := os.Stat(filepath.Join(p.bin, name)); err != nil {
			t.Fatalf("PostgreSQL server binary %s not found in %s (%v): install PostgreSQL 15's server (Debian: postgresql-15) or set %s to the directory holding initdb and pg_ctl",
				name, p.bin, err, envPGBin)
		}
	}
	dir := t.TempDir()
	root := filepath.Join(dir, "pg")
	if err := os.Mkdir(root, 0o700); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("the test runs as root, and initdb refuses root: it needs the postgres OS user to run the servers as (%v)", err)
		}
		if _, err := exec.LookPath("runuser"); err != nil {
			t.Fatalf("the test runs as root and needs runuser (util-linux) to run the servers as postgres: %v", err)
		}
		p.asUser = []string{"runuser", "-u", "postgres", "--"}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		// The temporary directories are root's and private; postgres must
		// reach root to own what is inside it.
		for _, d := range []string{filepath.Dir(dir), dir} {
			if err := os.Chmod(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chown(root, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	p.root = root
	p.primary = &server{name: "primary", dir: filepath.Join(root, "primary"), port: freePort(t), log: filepath.Join(root, "primary.log")}
	p.standby = &server{name: "standby", dir: filepath.Join(root, "standby"), port: freePort(t), log: filepath.Join(root, "standby.log")}
	t.Cleanup(func() {
		if t.Failed() {
			for _, s := range []*server{p.primary, p.standby} {
				b, _ := os.ReadFile(s.log)
				t.Logf("%s server log (port %d):\n%s", s.name, s.port, tail(string(b), 40))
			}
		}
	})

	p.run("initdb", "-D", p.primary.dir, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync", "--no-instructions")
	commit := "synchronous_standby_names = '*'\nsynchronous_commit = on\n"
	if !synchronous {
		commit = "synchronous_standby_names = ''\nsynchronous_commit = local\n"
	}
	p.configure(p.primary, commit+`wal_level = replica
max_wal_senders = 4
wal_keep_size = '256MB'
`)
	p.start(p.primary)

	// -c fast: the backup starts at once instead of at the next checkpoint.
	// -R writes standby.signal and primary_conninfo.
	p.run("pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(p.primary.port), "-U", "postgres",
		"-D", p.standby.dir, "-R", "-X", "stream", "-c", "fast", "--no-sync")
	// Promoted, the standby is a primary with no standby of its own: it
	// must not wait for one, or every commit after the failover would hang.
	p.configure(p.standby, "synchronous_standby_names = ''\nsynchronous_commit = on\n")
	p.start(p.standby)
	p.waitStreaming(synchronous)
	return p
}

// configure appends settings to the server's postgresql.conf, after the
// common ones; a later line wins.
func (p *pair) configure(s *server, settings string) {
	p.t.Helper()
	f, err := os.OpenFile(filepath.Join(s.dir, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		p.t.Fatal(err)
	}
	defer f.Close()
	common := fmt.Sprintf(`
listen_addresses = '127.0.0.1'
port = %d
unix_socket_directories = ''
max_connections = 100
shared_buffers = '32MB'
fsync = off
`, s.port)
	if _, err := f.WriteString(common + settings); err != nil {
		p.t.Fatal(err)
	}
}

// start starts s and registers its immediate stop for the test's end.
func (p *pair) start(s *server) {
	p.t.Helper()
	p.run("pg_ctl", "-D", s.dir, "-l", s.log, "-w", "-t", "120", "start")
	p.t.Cleanup(func() {
		// Already stopped (the killed primary) is fine.
		_ = p.command("pg_ctl", "-D", s.dir, "-m", "immediate", "-w", "stop").Run()
	})
}

// kill stops s the way a crash does: every server process ends at once,
// with no checkpoint and nothing more sent to the standby. It returns once
// the server is gone.
func (p *pair) kill(s *server) {
	p.t.Helper()
	p.run("pg_ctl", "-D", s.dir, "-m", "immediate", "-w", "stop")
}

// promote makes the standby a primary and returns once it accepts writes.
func (p *pair) promote() {
	p.t.Helper()
	p.run("pg_ctl", "-D", p.standby.dir, "-w", "-t", "120", "promote")
}

// url is the URL of the pair that workers are given: both hosts, and
// target_session_attrs=read-write, so a connection goes to whichever
// accepts writes.
func (p *pair) url(params string) string {
	u := fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&target_session_attrs=read-write&connect_timeout=5",
		p.primary.port, p.standby.port)
	if params != "" {
		u += "&" + params
	}
	return u
}

// waitStreaming waits until the primary sees the standby streaming, as a
// synchronous standby when synchronous is set.
func (p *pair) waitStreaming(synchronous bool) {
	p.t.Helper()
	want := "async"
	if synchronous {
		want = "sync"
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", p.primary.port))
	if err != nil {
		p.t.Fatalf("connect to the primary: %v", err)
	}
	defer func() { _ = conn.Close(ctx) }()
	deadline := time.Now().Add(time.Minute)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming' AND sync_state = $1`, want).Scan(&n); err != nil {
			p.t.Fatalf("read pg_stat_replication: %v", err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("the standby is not streaming (%s) to the primary after a minute", want)
		}
		<-tick.C
	}
}

// command returns a command running a PostgreSQL binary as the postgres
// user.
func (p *pair) command(name string, args ...string) *exec.Cmd {
	argv := append(append(append([]string{}, p.asUser...), filepath.Join(p.bin, name)), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = p.root // the test's own directory may be closed to postgres
	return cmd
}

func (p *pair) run(name string, args ...string) {
	p.t.Helper()
	out, err := p.command(name, args...).CombinedOutput()
	if err != nil {
		p.t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
