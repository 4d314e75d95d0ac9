package clustertest

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/testkit/mysqltest"
	"github.com/twicejobs/twice/internal/testkit/nodetest"
	"github.com/twicejobs/twice/internal/testkit/waitfor"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// The MariaDB server binaries the restart test builds its server with.
const (
	envMariaDBBin       = "TWICE_TEST_MARIADB_BIN" // the directory of mariadbd; overrides the defaults
	mariadbdDefault     = "/usr/sbin/mariadbd"
	mariadbInstallDBBin = "mariadb-install-db"
)

// mariadbServer is a MariaDB server made for one test, in its temporary
// directory (removed when the test ends), on a port of its own, with a
// root user with no password.
type mariadbServer struct {
	t       testing.TB
	daemon  string // mariadbd's path
	dir     string // the server's directory: data, socket, log
	port    int
	log     string // the server's error log
	cmd     *exec.Cmd
	exited  chan error
	started int // how many times it was started
}

// newMariaDBServer initializes a data directory and starts a server on
// it, and kills the server when the test ends, passed or failed (before
// the temporary directory is removed).
//
// It skips the test when TWICE_TEST_MYSQL is unset, like every MySQL test,
// and fails it when it is set but the server binaries are missing: CI sets
// it, and must never pass by skipping.
//
// InnoDB writes its log to the operating system at each commit but does
// not flush it to the disk (innodb_flush_log_at_trx_commit=2): SIGKILL
// kills the server, not the machine, so what the operating system was
// handed survives it, and the test stays fast on a small machine.
func newMariaDBServer(t testing.TB) *mariadbServer {
	t.Helper()
	if os.Getenv(mysqltest.EnvDSN) == "" {
		t.Skip(mysqltest.EnvDSN + " is not set; .ci/run sets it, and this test then builds a MariaDB server of its own")
	}
	daemon, installDB := mariadbdDefault, mariadbInstallDBBin
	if dir := os.Getenv(envMariaDBBin); dir != "" {
		daemon = filepath.Join(dir, "mariadbd")
		installDB = filepath.Join(dir, mariadbInstallDBBin)
	}
	if _, err := os.Stat(daemon); err != nil {
		t.Fatalf("MariaDB server binary %s not found (%v): install MariaDB's server (Debian: mariadb-server) or set %s to the directory holding mariadbd and mariadb-install-db",
			daemon, err, envMariaDBBin)
	}
	installDB, err := exec.LookPath(installDB)
	if err != nil {
		t.Fatalf("%s not found (%v): install MariaDB's server (Debian: mariadb-server) or set %s", mariadbInstallDBBin, err, envMariaDBBin)
	}
	s := &mariadbServer{t: t, daemon: daemon, dir: t.TempDir(), port: freePort(t)}
	s.log = filepath.Join(s.dir, "server.log")
	args := []string{"--no-defaults", "--datadir=" + filepath.Join(s.dir, "data"), "--auth-root-authentication-method=normal", "--skip-test-db"}
	if os.Geteuid() == 0 {
		args = append(args, "--user=root")
	}
	if out, err := exec.Command(installDB, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", installDB, strings.Join(args, " "), err, out)
	}
	t.Cleanup(func() {
		s.kill()
		if t.Failed() {
			b, _ := os.ReadFile(s.log)
			t.Logf("MariaDB server log (port %d):\n%s", s.port, tail(string(b), 40))
		}
	})
	s.start()
	return s
}

// dsn is the server's root DSN, on database db.
func (s *mariadbServer) dsn(db string) string {
	return fmt.Sprintf("root@tcp(127.0.0.1:%d)/%s?parseTime=true", s.port, db)
}

// start starts the server on its data directory (recovering it after a
// kill) and returns once it accepts connections.
func (s *mariadbServer) start() {
	s.t.Helper()
	s.started++
	args := []string{"--no-defaults",
		"--datadir=" + filepath.Join(s.dir, "data"),
		"--socket=" + filepath.Join(s.dir, "sock"),
		"--pid-file=" + filepath.Join(s.dir, "pid"),
		"--log-error=" + s.log,
		"--port=" + strconv.Itoa(s.port),
		"--bind-address=127.0.0.1",
		"--max-connections=300",
		"--innodb-buffer-pool-size=128M",
		"--innodb-flush-log-at-trx-commit=2",
		"--skip-log-bin",
	}
	if os.Geteuid() == 0 {
		args = append(args, "--user=root")
	}
	s.cmd = exec.Command(s.daemon, args...)
	s.cmd.Dir = s.dir
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("start mariadbd: %v", err)
	}
	exited := make(chan error, 1)
	s.exited = exited
	go func() { exited <- s.cmd.Wait() }()
	db, err := sql.Open("mysql", s.dsn(""))
	if err != nil {
		s.t.Fatal(err)
	}
	defer db.Close()
	deadline := time.Now().Add(2 * time.Minute)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if err = db.Ping(); err == nil {
			return
		}
		select {
		case werr := <-exited:
			exited <- werr
			b, _ := os.ReadFile(s.log)
			s.t.Fatalf("mariadbd exited on start %d: %v\n%s", s.started, werr, tail(string(b), 40))
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("mariadbd accepts no connection two minutes after start %d: %v", s.started, err)
		}
	}
}

// kill ends the server with SIGKILL, the way a crash does: no shutdown,
// no buffer flushed, every connection dropped. It returns once the server
// is gone; a server not running is left as it is.
func (s *mariadbServer) kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	select {
	case err := <-s.exited:
		s.exited <- err // gone already
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	err := <-s.exited
	s.exited <- err
	s.t.Logf("mariadbd killed: %v", err)
}

// TestClusterSurvivesMariaDBRestart: three worker processes work 6,000
// jobs on a MariaDB server of the test's own, which is killed with
// SIGKILL twice mid-run and started again each time (InnoDB recovers
// from its log). The workers ride out the outage: nothing is lost, no job
// completes twice, every Transactional credit is applied exactly once and
// every ClaimAfter email is sent at least once (twice only if the crash
// came between the email and its job's completion).
func TestClusterSurvivesMariaDBRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test skipped in -short mode")
	}
	server := newMariaDBServer(t)
	dsn, name := mysqltest.DatabaseIn(t, server.dsn(""), "twice_restart")
	c := newClusterOn(t, mariadbBackend, mariadbDatabaseAt(t, dsn, name))
	ctx := context.Background()
	const perKind = 3000
	producer, err := twice.NewClient(c.store, twice.Config{})
	if err != nil {
		t.Fatal(err)
	}
	batch := make([]twice.EnqueueParams, 0, 1000)
	for i := int64(1); i <= perKind; i++ {
		batch = append(batch, twice.EnqueueParams{Args: creditArgs{CreditID: i}}, twice.EnqueueParams{Args: emailArgs{Seq: i}})
		if len(batch) == cap(batch) {
			if _, err := producer.EnqueueMany(ctx, batch); err != nil {
				t.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	const total = 2 * perKind
	var workers []*nodetest.Process
	for _, node := range []string{"w0", "w1", "w2"} {
		workers = append(workers, c.start(node))
	}
	start := time.Now()
	for round, at := range []int{total * 3 / 10, total * 6 / 10} {
		c.waitCompleted(at, 5*time.Minute)
		logged := make([]int, len(workers))
		for i, w := range workers {
			logged[i] = len(w.Stderr())
		}
		server.kill()
		t.Logf("restart %d: killed the server at %d or more completed jobs (%s)", round+1, at, time.Since(start))
		// The outage lasts until every worker has noticed it: each logs
		// the errors of its polls and heartbeats.
		waitfor.CondWithin(t, time.Minute, "every worker to log the outage", func() bool {
			for i, w := range workers {
				if len(w.Stderr()) == logged[i] {
					return false
				}
			}
			return true
		}, func() string { return "" })
		server.start()
		t.Logf("restart %d: the server accepts connections again (%s)", round+1, time.Since(start))
	}
	c.waitCompleted(total, 5*time.Minute)
	t.Logf("all %d jobs completed in %s through two server crashes", total, time.Since(start))
	c.workers.StopAll()

	counts, err := c.store.JobCount(ctx, &twicestore.JobCountParams{})
	if err != nil {
		t.Fatal(err)
	}
	for _, jc := range counts.Counts {
		if jc.State != twicetype.JobStateCompleted {
			t.Errorf("%d %s jobs of kind %s left", jc.Count, jc.State, jc.Kind)
		}
	}
	for _, ch := range []struct {
		what  string
		query string
		want  int
	}{
		{"moves to completed", `SELECT count(*) FROM completions`, total},
		{"jobs completed more than once", `SELECT count(*) FROM (SELECT job_id FROM completions GROUP BY job_id HAVING count(*) > 1) AS d`, 0},
		{"ledger rows", `SELECT count(*) FROM ledger`, perKind},
		{"credits applied", `SELECT count(DISTINCT credit_id) FROM ledger`, perKind},
		{"emails sent to distinct ids", `SELECT count(DISTINCT email_id) FROM sent_emails`, perKind},
	} {
		if got := c.count(ch.query); got != ch.want {
			t.Errorf("%s: %d, want %d", ch.what, got, ch.want)
		}
	}
	t.Logf("emails sent twice (ClaimAfter's accepted duplicates after a crash): %d",
		len(c.ids(`SELECT email_id FROM sent_emails GROUP BY email_id HAVING count(*) > 1`)))
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
