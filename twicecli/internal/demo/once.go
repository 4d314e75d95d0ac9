package demo

import (
	"context"
	"fmt"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// settleTimeout bounds each phase of the scripted scenario. A crashed job
// needs its lease (2s) to run out and a rescue (every 1s) before it runs
// again, so a phase normally settles in under five seconds.
const settleTimeout = 30 * time.Second

// fate is what happens to a signed-up user before the email goes out.
type fate int

const (
	live      fate = iota
	deleted        // the account is deleted: the email is a no-op
	confirmed      // the address is confirmed another way: a no-op
)

func (f fate) String() string {
	switch f {
	case deleted:
		return "deleted"
	case confirmed:
		return "confirmed"
	}
	return "live"
}

// fault is what is injected into a user's email.
type fault int

const (
	noFault   fault = iota
	crashed         // the process dies between the send and the claim
	transient       // the sink fails the first send, the retry succeeds
	bounced         // the sink refuses permanently; an operator retries it
	redeliver       // the message is delivered again after it was processed
)

// plan is what the scenario did, for the checker: every user, credit and
// image it created, with what it expects of each.
type plan struct {
	users   []*plannedUser
	credits []*plannedCredit
	images  []*plannedImage
	jobIDs  []int64
	faults  []string
}

type plannedUser struct {
	id    int64
	name  string
	fate  fate
	fault fault
	email *twicetype.JobRow
}

type plannedImage struct {
	id  int64
	job *twicetype.JobRow
}

type plannedCredit struct {
	id, userID, cents int64
	job               *twicetype.JobRow
}

func (p *plan) note(format string, args ...any) {
	p.faults = append(p.faults, fmt.Sprintf(format, args...))
}

func (p *plan) user(id int64) *plannedUser {
	for _, u := range p.users {
		if u.id == id {
			return u
		}
	}
	return nil
}

// RunOnce runs the scripted scenario on opts.DB and checks its outcome:
// signups with a deleted user, a confirmed user, two crashes between send
// and claim, two transient send failures, a bounce retried from the
// dead-letter queue, credits and images redelivered at once and after
// processing. It returns the report of what converged; an error means the
// scenario could not run to its end.
func RunOnce(ctx context.Context, opts Options) (*Report, error) {
	opts = opts.withDefaults()
	a, client, err := open(ctx, opts)
	if err != nil {
		return nil, err
	}
	defer func() { _ = a.Close() }()
	fmt.Fprintf(opts.Out, "twice demo: scripted signup flow on %s (objects in %s)\n", displayDB(opts.DB), a.objects)

	p := &plan{}
	if err := a.phaseOne(ctx, client, p); err != nil {
		return nil, err
	}
	fmt.Fprintf(opts.Out, "enqueued %d jobs; starting the worker\n", len(p.jobIDs))
	if err := client.Start(ctx); err != nil {
		return nil, err
	}
	err = a.runPhases(ctx, client, p, opts)
	if serr := stop(ctx, client); err == nil && serr != nil {
		err = serr
	}
	if err != nil {
		return nil, err
	}
	if opts.beforeCheck != nil {
		if err := opts.beforeCheck(ctx, a); err != nil {
			return nil, err
		}
	}
	return a.check(ctx, p)
}

func (a *App) runPhases(ctx context.Context, client *twice.Client, p *plan, opts Options) error {
	if err := a.waitSettled(ctx, p.jobIDs, settleTimeout); err != nil {
		return err
	}
	fmt.Fprintln(opts.Out, "first deliveries settled; redelivering processed messages and retrying the dead letter")
	if err := a.phaseTwo(ctx, client, p); err != nil {
		return err
	}
	return a.waitSettled(ctx, p.jobIDs, settleTimeout)
}

// phaseOne signs users up, grants credits and uploads images before any
// worker runs, so the no-op cases (deleted, confirmed) are deterministic,
// and arms the faults.
func (a *App) phaseOne(ctx context.Context, c *twice.Client, p *plan) error {
	signups := []struct {
		name  string
		fate  fate
		fault fault
	}{
		{"alice", live, noFault},
		{"bob", live, noFault},
		{"carol", deleted, noFault},
		{"dave", confirmed, noFault},
		{"erin", live, crashed},
		{"frank", live, crashed},
		{"grace", live, transient},
		{"heidi", live, transient},
		{"ivan", live, redeliver},
		{"judy", live, bounced},
	}
	for _, s := range signups {
		su, err := a.Signup(ctx, c, s.name, 500)
		if err != nil {
			return err
		}
		u := &plannedUser{id: su.UserID, name: s.name, fate: s.fate, fault: s.fault, email: su.Email}
		p.users = append(p.users, u)
		p.credits = append(p.credits, &plannedCredit{id: su.CreditID, userID: su.UserID, cents: 500, job: su.Credit})
		p.jobIDs = append(p.jobIDs, su.Email.ID, su.Credit.ID)
		switch s.fate {
		case deleted:
			if err := a.DeleteUser(ctx, u.id); err != nil {
				return err
			}
			p.note("user %s deleted after signup: email job %d should be a no-op, credit job %d too", s.name, su.Email.ID, su.Credit.ID)
		case confirmed:
			if err := a.ConfirmUser(ctx, u.id); err != nil {
				return err
			}
			p.note("user %s confirmed before the email went out: email job %d should be a no-op", s.name, su.Email.ID)
		}
		switch s.fault {
		case crashed:
			a.faults.CrashAfterSend(su.Email.ID, su.Email.Key)
			p.note("crash between send and claim for %s's email (job %d): one duplicate email allowed", s.name, su.Email.ID)
		case transient:
			a.faults.FailSendOnce(u.id)
			p.note("transient sink failure on %s's first send (job %d): retried", s.name, su.Email.ID)
		case bounced:
			a.faults.BounceOnce(u.id)
			p.note("permanent bounce on %s's first send (job %d): dead-lettered, then retried by the operator", s.name, su.Email.ID)
		}
	}

	// More credits, one of them delivered twice at once.
	for _, g := range []struct {
		user  int
		cents int64
	}{{0, 250}, {1, 125}, {4, 75}} {
		u := p.users[g.user]
		id, job, err := a.GrantCredit(ctx, c, u.id, g.cents, "referral")
		if err != nil {
			return err
		}
		p.credits = append(p.credits, &plannedCredit{id: id, userID: u.id, cents: g.cents, job: job})
		p.jobIDs = append(p.jobIDs, job.ID)
	}
	twin := p.credits[len(p.credits)-1]
	id, err := a.redeliver(ctx, c, p, CreditBalance{CreditID: twin.id, UserID: twin.userID, AmountCents: twin.cents}, twin.job)
	if err != nil {
		return err
	}
	p.note("credit %d delivered twice at once (jobs %d and %d, one message): exactly one ledger row", twin.id, twin.job.ID, id)

	// Images, two of them delivered twice at once.
	for i := range 5 {
		id, job, err := a.UploadImage(ctx, c, fmt.Sprintf("ad-%d.png", i+1))
		if err != nil {
			return err
		}
		p.images = append(p.images, &plannedImage{id: id, job: job})
		p.jobIDs = append(p.jobIDs, job.ID)
		if i == 1 || i == 2 {
			again, err := a.redeliver(ctx, c, p, WatermarkImage{ImageID: id}, job)
			if err != nil {
				return err
			}
			p.note("image %d delivered twice at once (jobs %d and %d, one message): one object", id, job.ID, again)
		}
	}
	return nil
}

// phaseTwo runs once the first deliveries settled: processed messages are
// delivered again, and the operator retries the bounced email from the
// dead-letter queue.
func (a *App) phaseTwo(ctx context.Context, c *twice.Client, p *plan) error {
	for _, u := range p.users {
		switch u.fault {
		case redeliver:
			id, err := a.redeliver(ctx, c, p, VerificationEmail{UserID: u.id}, u.email)
			if err != nil {
				return err
			}
			p.note("%s's email delivered again after it was sent (job %d, same message as job %d): no second email",
				u.name, id, u.email.ID)
		case bounced:
			row, err := a.store.JobGet(ctx, &twicestore.JobGetParams{ID: u.email.ID})
			if err != nil {
				return err
			}
			if row.State != twicetype.JobStateDead {
				return fmt.Errorf("bounced email job %d is %s, expected it dead-lettered", row.ID, row.State)
			}
			if _, err := a.store.JobRetry(ctx, &twicestore.JobBulkParams{
				Filter: twicestore.JobFilter{IDs: []int64{row.ID}}, Now: time.Now(),
			}); err != nil {
				return err
			}
		}
	}
	bob := p.credits[1]
	id, err := a.redeliver(ctx, c, p, CreditBalance{CreditID: bob.id, UserID: bob.userID, AmountCents: bob.cents}, bob.job)
	if err != nil {
		return err
	}
	p.note("credit %d delivered again after it was applied (job %d, same message as job %d): no second ledger row",
		bob.id, id, bob.job.ID)
	img := p.images[3]
	if id, err = a.redeliver(ctx, c, p, WatermarkImage{ImageID: img.id}, img.job); err != nil {
		return err
	}
	p.note("image %d delivered again after it was watermarked (job %d, same message as job %d): the object is overwritten, not doubled",
		img.id, id, img.job.ID)
	return nil
}

// redeliver enqueues args again as the message of job and returns the new
// job's id.
func (a *App) redeliver(ctx context.Context, c *twice.Client, p *plan, args twice.Args, of *twicetype.JobRow) (int64, error) {
	j, err := a.Redeliver(ctx, c, args, of)
	if err != nil {
		return 0, err
	}
	p.jobIDs = append(p.jobIDs, j.ID)
	return j.ID, nil
}
