package clustertest

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicetype"
)

// envEnqueuer, set in a process's environment, makes it an enqueuer
// (runEnqueuer) instead of a worker.
const envEnqueuer = "TWICE_CLUSTER_ENQUEUER"

// uniqueKeys is how many unique jobs the enqueuers race to insert.
const uniqueKeys = 2000

// uniqueArgs is a job that holds its key by its args for good (while
// available, running, and completed), so each key makes one job however
// many enqueues race for it and whenever they come. Its effect commits
// with the job.
type uniqueArgs struct {
	Key int `json:"key"`
}

func (uniqueArgs) Kind() string { return "cluster.unique.v1" }

// registerUnique adds the unique kind to a registry: an enqueuer's, which
// takes its unique options from it, or a worker's.
func registerUnique(reg *twice.Registry) {
	twice.MustRegister(reg, twice.HandlerFunc[uniqueArgs](func(ctx context.Context, job *twice.Job[uniqueArgs]) error {
		return txExec(ctx, job.Tx(), `INSERT INTO unique_effects (ukey, job_id) VALUES ($1, $2)`, job.Args.Key, job.ID)
	}), &twice.KindOpts{Strategy: twice.Transactional, MaxAttempts: 50, Unique: &twice.UniqueOpts{ByArgs: true,
		ByStates: []twicetype.JobState{twicetype.JobStateAvailable, twicetype.JobStateRunning, twicetype.JobStateCompleted}}})
}

// runEnqueuer is the life of an enqueuer process: once the test lets the
// race start (a row in race_go), it enqueues every unique key, in the
// order all enqueuers share, in chunks of its own sizes (one job through
// Enqueue, more through EnqueueMany), and records each result in
// race_results; then it records that it is done and waits for SIGTERM.
// Every key is thus enqueued by every enqueuer at about the same moment,
// alone or in batches that overlap each other's differently.
func runEnqueuer(b *backend, url string, db database, logger *slog.Logger) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	node := os.Getenv(envNode)
	store, err := b.openStore(ctx, url)
	if err != nil {
		logger.Error("enqueuer: open store", "err", err)
		return 1
	}
	defer store.Close()
	reg := twice.NewRegistry()
	registerUnique(reg)
	client, err := twice.NewClient(store, twice.Config{Registry: reg, Logger: logger})
	if err != nil {
		logger.Error("enqueuer: client", "err", err)
		return 1
	}
	tick := time.NewTicker(5 * time.Millisecond)
	for started := 0; started == 0; <-tick.C {
		if err := db.QueryRow(ctx, `SELECT count(*) FROM race_go`).Scan(&started); err != nil {
			logger.Error("enqueuer: wait for the start", "err", err)
			return 1
		}
	}
	tick.Stop()
	order := rand.New(rand.NewPCG(1, 2)).Perm(uniqueKeys)
	h := fnv.New64a()
	_, _ = h.Write([]byte(node))
	sizes := rand.New(rand.NewPCG(h.Sum64(), 3))
	for len(order) > 0 {
		chunk := order[:min(len(order), 1+sizes.IntN(12))]
		order = order[len(chunk):]
		var results []*twice.EnqueueResult
		if len(chunk) == 1 {
			res, err := client.Enqueue(ctx, uniqueArgs{Key: chunk[0]}, nil)
			if err != nil {
				logger.Error("enqueuer: enqueue", "err", err)
				return 1
			}
			results = []*twice.EnqueueResult{res}
		} else {
			params := make([]twice.EnqueueParams, len(chunk))
			for i, key := range chunk {
				params[i] = twice.EnqueueParams{Args: uniqueArgs{Key: key}}
			}
			if results, err = client.EnqueueMany(ctx, params); err != nil {
				logger.Error("enqueuer: enqueue many", "err", err)
				return 1
			}
		}
		for i, res := range results {
			if err := db.Exec(ctx, `INSERT INTO race_results (node, ukey, job_id, duplicate) VALUES ($1, $2, $3, $4)`,
				node, chunk[i], res.Job.ID, res.Duplicate); err != nil {
				logger.Error("enqueuer: record", "err", err)
				return 1
			}
		}
	}
	if err := db.Exec(ctx, `INSERT INTO racers_done (node) VALUES ($1)`, node); err != nil {
		logger.Error("enqueuer: done", "err", err)
		return 1
	}
	<-ctx.Done()
	return 0
}

// TestClusterUniqueEnqueueRace: three enqueuer processes insert the same
// 2,000 unique jobs at once, in the same order but in batches of
// different sizes, so nodes race on one key again and again, alone and
// in overlapping batches; two worker processes work the jobs as they
// come, and one of them is SIGKILLed mid-run and replaced. The database
// settles every race: each key makes exactly one job, every enqueuer got
// that job back (exactly one of them as new, the others as duplicates),
// each job's Transactional effect exists exactly once, every job
// completed once.
func TestClusterUniqueEnqueueRace(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test skipped in -short mode")
	}
	onEachBackend(t, testUniqueEnqueueRace)
}

func testUniqueEnqueueRace(t *testing.T, b *backend) {
	const racers = 3
	c := newCluster(t, b)
	c.exec(`CREATE TABLE unique_effects (ukey int NOT NULL, job_id bigint NOT NULL)`,
		`CREATE TABLE race_results (node text NOT NULL, ukey int NOT NULL, job_id bigint NOT NULL, duplicate boolean NOT NULL)`,
		`CREATE TABLE race_go (at int NOT NULL)`,
		`CREATE TABLE racers_done (node text NOT NULL)`)
	for i := range racers {
		c.workers.Start(fmt.Sprint("enqueuer-", i), envURL+"="+c.url, envNode+"="+fmt.Sprint("enqueuer-", i),
			c.b.workerEnv(), envEnqueuer+"=1")
	}
	victim := c.start("w0")
	c.start("w1")
	start := time.Now()
	c.exec(`INSERT INTO race_go VALUES (1)`)
	c.waitCompleted(uniqueKeys*3/10, 5*time.Minute)
	c.kill(victim)
	t.Logf("killed %s at %d completed jobs (%s)", victim.Node, c.completed(), time.Since(start))
	c.start("w0-gen2")
	c.waitCompleted(uniqueKeys, 5*time.Minute)
	waitUntil := time.Now().Add(2 * time.Minute)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for c.count(`SELECT count(*) FROM racers_done`) < racers {
		if time.Now().After(waitUntil) {
			c.workers.LogStderr(20)
			t.Fatalf("%d of %d enqueuers done after two minutes", c.count(`SELECT count(*) FROM racers_done`), racers)
		}
		<-tick.C
	}
	t.Logf("%d keys enqueued %d times each and worked in %s; %d results of %d enqueuers", uniqueKeys, racers,
		time.Since(start), c.count(`SELECT count(*) FROM race_results`), racers)

	for _, ch := range []struct {
		what  string
		query string
		want  int
	}{
		{"jobs of the unique kind", `SELECT count(*) FROM twice_jobs WHERE kind = 'cluster.unique.v1'`, uniqueKeys},
		{"jobs not completed", `SELECT count(*) FROM twice_jobs WHERE state <> 'completed'`, 0},
		{"enqueue results", `SELECT count(*) FROM race_results`, racers * uniqueKeys},
		{"keys given more than one job", `SELECT count(*) FROM (SELECT ukey FROM race_results
			GROUP BY ukey HAVING count(DISTINCT job_id) <> 1) AS d`, 0},
		{"keys inserted other than once", `SELECT count(*) FROM (SELECT ukey FROM race_results
			GROUP BY ukey HAVING sum(CASE WHEN duplicate THEN 0 ELSE 1 END) <> 1) AS d`, 0},
		{"results naming no job of the kind", `SELECT count(*) FROM race_results AS r
			LEFT JOIN twice_jobs AS j ON j.id = r.job_id AND j.kind = 'cluster.unique.v1' WHERE j.id IS NULL`, 0},
		{"effects", `SELECT count(*) FROM unique_effects`, uniqueKeys},
		{"keys with an effect", `SELECT count(DISTINCT ukey) FROM unique_effects`, uniqueKeys},
		{"effects of a job other than the key's", `SELECT count(*) FROM unique_effects AS e
			WHERE NOT EXISTS (SELECT 1 FROM race_results AS r WHERE r.ukey = e.ukey AND r.job_id = e.job_id)`, 0},
		{"moves to completed", `SELECT count(*) FROM completions`, uniqueKeys},
		{"jobs completed twice", `SELECT count(*) FROM (SELECT job_id FROM completions
			GROUP BY job_id HAVING count(*) > 1) AS d`, 0},
	} {
		if got := c.count(ch.query); got != ch.want {
			t.Errorf("%s: %d, want %d", ch.what, got, ch.want)
		}
	}
	t.Logf("enqueues answered as duplicates: %d of %d", c.count(`SELECT count(*) FROM race_results WHERE duplicate`), racers*uniqueKeys)
}
