package clustertest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twicejobs/twice"
)

// stepOrder is a 3-step checkout: a charge (ClaimBefore) and an email
// (ClaimAfter) written outside the job's transaction, and a ledger row
// (Transactional) written in its step's transaction.
type stepOrder struct{ Order int }

func (stepOrder) Kind() string             { return "cluster.step-order.v1" }
func (a stepOrder) IdempotencyKey() string { return fmt.Sprint("step-order-", a.Order) }

// stepWork is how long each step's effect takes: long enough that a kill
// lands inside steps and between them.
const stepWork = 3 * time.Millisecond

func pause(ctx context.Context) error {
	t := time.NewTimer(stepWork)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// registerSteps adds the stepped kind to a worker's registry.
func registerSteps(reg *twice.Registry, db database) {
	twice.MustRegister(reg, twice.HandlerFunc[stepOrder](func(ctx context.Context, job *twice.Job[stepOrder]) error {
		charge, err := twice.Step(ctx, "charge", twice.ClaimBefore, func(ctx context.Context) (int64, error) {
			id, err := db.InsertID(ctx, `INSERT INTO step_charges (order_id, effect_key) VALUES ($1, $2)`,
				job.Args.Order, job.EffectKey("charge"))
			if err != nil {
				return 0, twice.NotApplied(err) // the insert failed: no charge
			}
			return id, pause(ctx)
		})
		if err != nil {
			return err
		}
		if _, err := twice.Step(ctx, "ledger", twice.Transactional, func(ctx context.Context) (bool, error) {
			if err := txExec(ctx, twice.StepTx(ctx), `INSERT INTO step_ledger (order_id, charge_id) VALUES ($1, $2)`, job.Args.Order, charge); err != nil {
				return false, err
			}
			return true, pause(ctx)
		}); err != nil {
			return err
		}
		if _, err := twice.Step(ctx, "email", twice.ClaimAfter, func(ctx context.Context) (bool, error) {
			if err := db.Exec(ctx, `INSERT INTO step_emails (order_id) VALUES ($1)`, job.Args.Order); err != nil {
				return false, err
			}
			return true, pause(ctx)
		}); err != nil {
			return err
		}
		return twice.RecordOutput(ctx, charge)
	}), &twice.KindOpts{Strategy: twice.None, MaxAttempts: 50})
}

// TestClusterStepsThroughKill: three worker processes, each delivering
// every job twice (Config.Redeliver), run orders of three steps while one
// worker is SIGKILLed three times mid-run. Every order either completed
// with exactly one charge, exactly one ledger row (carrying that charge's
// id, read back from the receipt by any later delivery), at least one
// email and the charge id as its output, or is dead-lettered for a person
// because a charge's claim was left unfinished by a kill, with at most
// one charge and nothing after it.
func TestClusterStepsThroughKill(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test skipped in -short mode")
	}
	onEachBackend(t, testStepsThroughKill)
}

// stepSQL is what the steps test reads of a job row, on either backend:
// the order number in its args, its output as a number, and the message
// of its last error.
type stepSQL struct{ order, output, lastError string }

func stepsSQL(b *backend) stepSQL {
	if b == postgresBackend {
		return stepSQL{
			order:     `(convert_from(j.args, 'UTF8')::jsonb ->> 'Order')::int`,
			output:    `c.output::bigint`,
			lastError: `(j.errors -> -1 ->> 'error')`,
		}
	}
	return stepSQL{
		order:     `CAST(JSON_EXTRACT(CONVERT(j.args USING utf8mb4), '$.Order') AS SIGNED)`,
		output:    `CAST(CONVERT(c.output USING utf8mb4) AS SIGNED)`,
		lastError: `JSON_UNQUOTE(JSON_EXTRACT(j.errors, CONCAT('$[', JSON_LENGTH(j.errors) - 1, '].error')))`,
	}
}

func testStepsThroughKill(t *testing.T, b *backend) {
	const orders = 600
	c := newCluster(t, b)
	ctx := context.Background()
	c.exec(`CREATE TABLE step_charges (id `+c.dialect().serial+`, order_id int NOT NULL, effect_key text NOT NULL)`,
		`CREATE TABLE step_ledger (order_id int NOT NULL, charge_id bigint NOT NULL)`,
		`CREATE TABLE step_emails (order_id int NOT NULL)`)
	producer, err := twice.NewClient(c.store, twice.Config{})
	if err != nil {
		t.Fatal(err)
	}
	params := make([]twice.EnqueueParams, orders)
	for i := range params {
		params[i] = twice.EnqueueParams{Args: stepOrder{Order: i}}
	}
	if _, err := producer.EnqueueMany(ctx, params); err != nil {
		t.Fatal(err)
	}
	finished := func() int {
		return c.count(`SELECT count(*) FROM twice_jobs WHERE kind = 'cluster.step-order.v1' AND state IN ('completed', 'dead')`)
	}
	waitFinished := func(n int) {
		deadline := time.Now().Add(5 * time.Minute)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for finished() < n {
			if time.Now().After(deadline) {
				t.Fatalf("only %d of %d orders finished", finished(), n)
			}
			<-tick.C
		}
	}
	start := time.Now()
	victim := c.start("w0", envRedeliver+"=1", envSlots+"=10")
	c.start("w1", envRedeliver+"=1", envSlots+"=10")
	c.start("w2", envRedeliver+"=1", envSlots+"=10")
	for gen, at := range []int{orders / 4, orders / 2, orders * 3 / 4} {
		waitFinished(at)
		c.kill(victim)
		t.Logf("killed %s at %d of %d finished orders (%s)", victim.Node, finished(), orders, time.Since(start))
		victim = c.start(fmt.Sprintf("w0-gen%d", gen+2), envRedeliver+"=1", envSlots+"=10")
	}
	waitFinished(orders)
	dead := c.count(`SELECT count(*) FROM twice_jobs WHERE kind = 'cluster.step-order.v1' AND state = 'dead'`)
	t.Logf("all %d orders finished in %s: %d dead-lettered for a person", orders, time.Since(start), dead)

	q := stepsSQL(b)
	completed := `SELECT ` + q.order + ` AS o, j.output FROM twice_jobs AS j
		WHERE j.kind = 'cluster.step-order.v1' AND j.state = 'completed'`
	deadOrders := `SELECT ` + q.order + ` AS o FROM twice_jobs AS j
		WHERE j.kind = 'cluster.step-order.v1' AND j.state = 'dead'`
	checks := []struct {
		what  string
		query string
		want  int
	}{
		{"orders charged more than once", `SELECT count(*) FROM (SELECT order_id FROM step_charges
			GROUP BY order_id HAVING count(*) > 1) AS d`, 0},
		{"orders with more than one ledger row", `SELECT count(*) FROM (SELECT order_id FROM step_ledger
			GROUP BY order_id HAVING count(*) > 1) AS d`, 0},
		{"completed orders without exactly one charge, one ledger row of that charge and an email, and the charge as output",
			`SELECT count(*) FROM (` + completed + `) AS c
			WHERE (SELECT count(*) FROM step_charges AS s WHERE s.order_id = c.o) <> 1
			OR (SELECT count(*) FROM step_ledger AS l JOIN step_charges AS s ON s.id = l.charge_id
				WHERE l.order_id = c.o AND s.order_id = c.o) <> 1
			OR NOT EXISTS (SELECT 1 FROM step_emails AS e WHERE e.order_id = c.o)
			OR c.output IS NULL
			OR ` + q.output + ` <> (SELECT min(s.id) FROM step_charges AS s WHERE s.order_id = c.o)`, 0},
		{"dead orders with a ledger row or an email", `SELECT count(*) FROM (` + deadOrders + `) AS d
			WHERE EXISTS (SELECT 1 FROM step_ledger AS l WHERE l.order_id = d.o)
			OR EXISTS (SELECT 1 FROM step_emails AS e WHERE e.order_id = d.o)`, 0},
		{"dead orders not for an unfinished charge", `SELECT count(*) FROM twice_jobs AS j
			WHERE j.kind = 'cluster.step-order.v1' AND j.state = 'dead'
			AND ` + q.lastError + ` NOT LIKE '%"charge"%never finished%'`, 0},
		{"charges under a key other than the order's effect key", `SELECT count(*) FROM (SELECT order_id FROM step_charges
			GROUP BY order_id HAVING count(DISTINCT effect_key) > 1) AS d`, 0},
		{"jobs completed twice", `SELECT count(*) FROM (SELECT job_id FROM completions
			GROUP BY job_id HAVING count(*) > 1) AS d`, 0},
	}
	for _, ch := range checks {
		if got := c.count(ch.query); got != ch.want {
			t.Errorf("%s: %d, want %d", ch.what, got, ch.want)
		}
	}
	t.Logf("orders emailed twice (ClaimAfter's accepted duplicates: two deliveries at once under Redeliver, or a kill between the email and its claim): %d",
		c.count(`SELECT count(*) FROM (SELECT order_id FROM step_emails GROUP BY order_id HAVING count(*) > 1) AS d`))
}
