package clustertest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/twicejobs/twice"
)

// envRedeliver set makes a worker deliver every job twice
// (Config.Redeliver).
const envRedeliver = "TWICE_CLUSTER_REDELIVER"

// dagTx is a Transactional workflow task: its effect row commits with the
// job, so it must exist exactly once. Each task also enqueues one
// continuation (dagLeaf), an edge of its own.
type dagTx struct{ Task int }

func (dagTx) Kind() string             { return "cluster.dag-tx.v1" }
func (a dagTx) IdempotencyKey() string { return fmt.Sprint("dag-tx-", a.Task) }

// dagEmail is a ClaimAfter workflow task: its effect is written outside
// the job's transaction, at least once.
type dagEmail struct{ Task int }

func (dagEmail) Kind() string             { return "cluster.dag-email.v1" }
func (a dagEmail) IdempotencyKey() string { return fmt.Sprint("dag-email-", a.Task) }

type dagLeaf struct{ Task int }

func (dagLeaf) Kind() string { return "cluster.dag-leaf.v1" }

type batchMember struct{ N int }

func (batchMember) Kind() string { return "cluster.batch-member.v1" }

// batchDone is a batch's callback; it records itself in its transaction.
type batchDone struct{ Batch int }

func (batchDone) Kind() string             { return "cluster.batch-done.v1" }
func (a batchDone) IdempotencyKey() string { return fmt.Sprint("batch-done-", a.Batch) }

// registerCompose adds the composition kinds to a worker's registry.
func registerCompose(reg *twice.Registry, db database) {
	twice.MustRegister(reg, twice.HandlerFunc[dagTx](func(ctx context.Context, job *twice.Job[dagTx]) error {
		if err := txExec(ctx, job.Tx(), `INSERT INTO dag_effects (task) VALUES ($1)`, job.Args.Task); err != nil {
			return err
		}
		return job.Then(dagLeaf(job.Args), nil)
	}), &twice.KindOpts{Strategy: twice.Transactional, MaxAttempts: 50})
	twice.MustRegister(reg, twice.HandlerFunc[dagEmail](func(ctx context.Context, job *twice.Job[dagEmail]) error {
		if err := db.Exec(ctx, `INSERT INTO dag_emails (task) VALUES ($1)`, job.Args.Task); err != nil {
			return err
		}
		return job.Then(dagLeaf(job.Args), nil)
	}), &twice.KindOpts{Strategy: twice.ClaimAfter, MaxAttempts: 50})
	twice.MustRegister(reg, twice.HandlerFunc[dagLeaf](func(context.Context, *twice.Job[dagLeaf]) error { return nil }),
		&twice.KindOpts{Strategy: twice.None, MaxAttempts: 50})
	twice.MustRegister(reg, twice.HandlerFunc[batchMember](func(context.Context, *twice.Job[batchMember]) error { return nil }),
		&twice.KindOpts{Strategy: twice.None, MaxAttempts: 50})
	twice.MustRegister(reg, twice.HandlerFunc[batchDone](func(ctx context.Context, job *twice.Job[batchDone]) error {
		return txExec(ctx, job.Tx(), `INSERT INTO batch_callbacks (batch) VALUES ($1)`, job.Args.Batch)
	}), &twice.KindOpts{Strategy: twice.Transactional, MaxAttempts: 50})
}

// randomDAG declares n tasks, each depending on up to three earlier ones
// chosen at random (so the graph has no cycle), alternating the two task
// kinds.
func randomDAG(rng *rand.Rand, n int) *twice.Workflow {
	w := twice.NewWorkflow("random-dag")
	for i := range n {
		var deps []string
		seen := map[int]bool{}
		for range rng.IntN(4) {
			if i == 0 {
				break
			}
			if d := rng.IntN(i); !seen[d] {
				seen[d] = true
				deps = append(deps, fmt.Sprint("t", d))
			}
		}
		var args twice.Args = dagTx{Task: i}
		if i%2 == 1 {
			args = dagEmail{Task: i}
		}
		w.Add(fmt.Sprint("t", i), args, nil, deps...)
	}
	return w
}

// TestClusterComposeThroughKill: three worker processes, each delivering
// every job twice (Config.Redeliver), run a random workflow of dagTasks
// tasks (each task also enqueueing one continuation) and a batch of
// batchSize jobs; one worker is SIGKILLed three times mid-run and
// replaced each time. Every
// edge must fire exactly once: one job per task, each task's job created
// after all its dependencies' jobs finished, one continuation per task
// job, one batch callback; the workflow completes; Transactional effects
// happen exactly once and ClaimAfter ones at least once.
func TestClusterComposeThroughKill(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test skipped in -short mode")
	}
	onEachBackend(t, testComposeThroughKill)
}

func testComposeThroughKill(t *testing.T, b *backend) {
	const (
		dagTasks  = 1000
		batchSize = 10_000
	)
	c := newCluster(t, b)
	ctx := context.Background()
	c.exec(`CREATE TABLE dag_effects (task int NOT NULL)`, `CREATE TABLE dag_emails (task int NOT NULL)`,
		`CREATE TABLE batch_callbacks (batch int NOT NULL)`)
	producer, err := twice.NewClient(c.store, twice.Config{})
	if err != nil {
		t.Fatal(err)
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("random DAG seed %d", seed)
	wf, err := producer.EnqueueWorkflow(ctx, randomDAG(rand.New(rand.NewPCG(seed, 14)), dagTasks))
	if err != nil {
		t.Fatal(err)
	}
	edges := c.count(`SELECT count(*) FROM twice_workflow_deps WHERE workflow_id = $1`, wf.Workflow.ID)
	members := twice.NewBatch(batchDone{Batch: 1}, nil)
	for i := range batchSize {
		members.Add(batchMember{N: i}, nil)
	}
	batch, err := producer.EnqueueBatch(ctx, members)
	if err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	victim := c.start("w0", envRedeliver+"=1")
	c.start("w1", envRedeliver+"=1")
	c.start("w2", envRedeliver+"=1")
	// every task, its continuation, every batch job and the callback
	total := 2*dagTasks + batchSize + 1
	for gen, at := range []int{total / 4, total / 2, total * 3 / 4} {
		c.waitCompleted(at, 5*time.Minute)
		c.kill(victim)
		t.Logf("killed %s at %d of %d completed jobs (%s)", victim.Node, c.completed(), total, time.Since(start))
		victim = c.start(fmt.Sprintf("w0-gen%d", gen+2), envRedeliver+"=1")
	}
	c.waitCompleted(total, 5*time.Minute)
	t.Logf("all %d jobs completed in %s (%d workflow edges)", total, time.Since(start), edges)

	id := wf.Workflow.ID
	checks := []struct {
		what  string
		query string
		want  int
	}{
		{"workflow completed", `SELECT count(*) FROM twice_workflows WHERE id = $1 AND state = 'completed' AND completed = tasks`, 1},
		{"tasks with a job", `SELECT count(DISTINCT workflow_task) FROM twice_jobs WHERE workflow_id = $1`, dagTasks},
		{"tasks with more than one job", `SELECT count(*) FROM (SELECT workflow_task FROM twice_jobs WHERE workflow_id = $1
			GROUP BY workflow_task HAVING count(*) > 1) AS d`, 0},
		{"tasks still waiting on a dependency", `SELECT count(*) FROM twice_workflow_tasks WHERE workflow_id = $1
			AND (pending <> 0 OR state <> 'enqueued')`, 0},
		{"dependants enqueued before a dependency finished", `SELECT count(*) FROM twice_workflow_deps AS d
			JOIN twice_jobs AS a ON a.workflow_id = d.workflow_id AND a.workflow_task = d.dep
			JOIN twice_jobs AS b ON b.workflow_id = d.workflow_id AND b.workflow_task = d.task
			WHERE d.workflow_id = $1 AND (a.finished_at IS NULL OR b.created_at < a.finished_at)`, 0},
		{"task jobs without exactly one continuation", `SELECT count(*) FROM twice_jobs AS p WHERE p.workflow_id = $1
			AND (SELECT count(*) FROM twice_jobs AS c WHERE c.parent_id = p.id) <> 1`, 0},
		{"transactional effects", `SELECT count(*) FROM dag_effects WHERE $1 > 0`, dagTasks / 2},
		{"distinct transactional effects", `SELECT count(DISTINCT task) FROM dag_effects WHERE $1 > 0`, dagTasks / 2},
		{"distinct emails", `SELECT count(DISTINCT task) FROM dag_emails WHERE $1 > 0`, dagTasks / 2},
		{"jobs completed twice", `SELECT count(*) FROM (SELECT job_id FROM completions WHERE $1 > 0
			GROUP BY job_id HAVING count(*) > 1) AS d`, 0},
		{"batch callback jobs", `SELECT count(*) FROM twice_jobs WHERE kind = 'cluster.batch-done.v1' AND $1 > 0`, 1},
		{"batch callback effects", `SELECT count(*) FROM batch_callbacks WHERE $1 > 0`, 1},
	}
	for _, ch := range checks {
		if got := c.count(ch.query, id); got != ch.want {
			t.Errorf("%s: %d, want %d", ch.what, got, ch.want)
		}
	}
	got, err := producer.BatchGet(ctx, batch.Batch.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Completed != batchSize || got.Pending != 0 || got.CallbackJobID == 0 {
		t.Errorf("batch %+v, want %d completed and its callback", got, batchSize)
	}
	t.Logf("emails sent twice (ClaimAfter's duplicates after the kill): %d",
		c.count(`SELECT count(*) FROM (SELECT task FROM dag_emails GROUP BY task HAVING count(*) > 1) AS d`))

}
