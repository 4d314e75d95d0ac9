package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// Run works the demo's kinds on opts.DB and keeps signing users up,
// granting credits and uploading images, with occasional faults, until ctx
// ends. Then it stops the worker, giving running jobs a short grace
// period, and prints what the run left behind.
func Run(ctx context.Context, opts Options) error {
	opts = opts.withDefaults()
	a, client, err := open(ctx, opts)
	if err != nil {
		return err
	}
	defer func() { _ = a.Close() }()
	// The API's address is taken before the worker starts, so a taken
	// port stops nothing that ran.
	var api net.Listener
	if opts.HTTPAddr != "" {
		api, err = net.Listen("tcp", opts.HTTPAddr)
		if err != nil && !opts.HTTPOptional {
			return fmt.Errorf("serve the demo API on %s: %w (pass --http with a free address, or --http '' for none)", opts.HTTPAddr, err)
		}
		if err != nil {
			fmt.Fprintf(opts.Out, "demo API: not served (%v); pass --http with a free address\n", err)
		}
	}
	if err := client.Start(ctx); err != nil {
		if api != nil {
			_ = api.Close()
		}
		return err
	}
	if api != nil {
		srv := &http.Server{Handler: a.Handler(client), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(api) }()
		defer func() { _ = srv.Close() }()
		printAPIBanner(opts.Out, "http://"+api.Addr().String())
	}
	if opts.Started != nil {
		if err := opts.Started(ctx, a.Store()); err != nil {
			return errors.Join(err, stop(ctx, client))
		}
	}
	printBanner(opts.Out, opts.DB, a.objects)
	l := &traffic{a: a, c: client, out: opts.Out}
	tick := time.NewTicker(opts.Interval)
	defer tick.Stop()
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-tick.C:
			if err = l.step(ctx); err != nil {
				break loop
			}
		}
	}
	if ctx.Err() != nil {
		err = nil // the step was cut short by Ctrl-C, not by a failure
	}
	fmt.Fprintln(opts.Out, "\nstopping the worker…")
	if serr := stop(ctx, client); err == nil {
		err = serr
	}
	if serr := a.printSummary(context.WithoutCancel(ctx), opts.Out, opts.DB); err == nil {
		err = serr
	}
	return err
}

// printAPIBanner shows the curl sequence that signs a user up through the
// Idempotency-Key middleware.
func printAPIBanner(w io.Writer, base string) {
	fmt.Fprintf(w, `The demo API is on %[1]s. Sign a user up, then retry the same request:
  curl -i -X POST %[1]s/signups -H 'Idempotency-Key: "signup-ada-1"' -d '{"name": "ada", "bonus_cents": 500}'
The retry is answered from the stored response (Idempotent-Replayed: true);
the same key with another body is refused (422). GET %[1]s/users/ID shows
the emails sent: one.

`, base)
}

func printBanner(w io.Writer, db, objects string) {
	shown := displayDB(db)
	sink := fmt.Sprintf("sqlite3 %s 'SELECT id, to_addr, url, message_key FROM demo_outbox ORDER BY id DESC LIMIT 10'", shown)
	switch {
	case IsPostgresURL(db):
		sink = "SELECT id, to_addr, url, message_key FROM demo_outbox ORDER BY id DESC LIMIT 10;   (in psql)"
	case IsMySQLURL(db):
		sink = "SELECT id, to_addr, url, message_key FROM demo_outbox ORDER BY id DESC LIMIT 10;   (in mysql)"
	}
	fmt.Fprintf(w, `twice demo: signing users up on %[1]s and working their jobs, with faults injected.
Watermarked images go to %[2]s.

Look at it from another terminal:
  twice jobs --db %[1]s                  recent jobs, their state and last error
  twice jobs show ID --db %[1]s          a job's envelope, args and error history
  twice dlq ls --db %[1]s                dead letters (bounced emails); retry them with twice dlq retry ID
  %[3]s
                                         the email sink: what would have been sent
Ctrl-C stops it.

`, shown, objects, sink)
}

// traffic produces the continuous demo's traffic.
type traffic struct {
	a     *App
	c     *twice.Client
	out   io.Writer
	n     int
	users []int64
	// later are redeliveries of processed emails, due at a later step.
	later []redelivery
}

type redelivery struct {
	due  int
	args twice.Args
	of   *twicetype.JobRow
}

// step produces one signup (with a fault one time in two), and every few
// steps a credit or an image.
func (l *traffic) step(ctx context.Context) error {
	l.n++
	if err := l.signup(ctx); err != nil {
		return err
	}
	if l.n%3 == 0 && len(l.users) > 0 {
		if err := l.credit(ctx); err != nil {
			return err
		}
	}
	if l.n%4 == 0 {
		if err := l.image(ctx); err != nil {
			return err
		}
	}
	keep := l.later[:0]
	for _, r := range l.later {
		if r.due > l.n {
			keep = append(keep, r)
			continue
		}
		j, err := l.a.Redeliver(ctx, l.c, r.args, r.of)
		if err != nil {
			return err
		}
		fmt.Fprintf(l.out, "redelivered the message of email job %d as job %d: it was processed, so no second email\n", r.of.ID, j.ID)
	}
	l.later = keep
	return nil
}

func (l *traffic) signup(ctx context.Context) error {
	name := fmt.Sprintf("user%03d", l.n)
	s, err := l.a.Signup(ctx, l.c, name, 500)
	if err != nil {
		return err
	}
	l.users = append(l.users, s.UserID)
	var what string
	switch rand.IntN(16) {
	case 0, 1:
		l.a.faults.CrashAfterSend(s.Email.ID, s.Email.Key)
		what = "crash between send and claim: expect one duplicate email after the 2s lease expires"
	case 2, 3:
		l.a.faults.FailSendOnce(s.UserID)
		what = "transient sink failure: the first send fails, the retry sends"
	case 4:
		l.a.faults.BounceOnce(s.UserID)
		what = fmt.Sprintf("bounce: the job is dead-lettered; `twice dlq retry %d` sends it", s.Email.ID)
	case 5:
		if err := l.a.DeleteUser(ctx, s.UserID); err != nil {
			return err
		}
		l.users = l.users[:len(l.users)-1]
		what = "account deleted right away: the email and credit become no-ops, unless they already ran"
	case 6:
		if err := l.a.ConfirmUser(ctx, s.UserID); err != nil {
			return err
		}
		what = "confirmed right away: the email becomes a no-op, unless it already went out"
	case 7:
		l.later = append(l.later, redelivery{due: l.n + 4, args: VerificationEmail{UserID: s.UserID}, of: s.Email})
		what = "its message will be delivered again in a few seconds"
	}
	fmt.Fprintf(l.out, "signup %s (user %d): email job %d, credit job %d", name, s.UserID, s.Email.ID, s.Credit.ID)
	if what != "" {
		fmt.Fprintf(l.out, " — %s", what)
	}
	fmt.Fprintln(l.out)
	return nil
}

func (l *traffic) credit(ctx context.Context) error {
	user := l.users[rand.IntN(len(l.users))]
	cents := int64(25 * (1 + rand.IntN(20)))
	id, job, err := l.a.GrantCredit(ctx, l.c, user, cents, "referral")
	if err != nil {
		return err
	}
	fmt.Fprintf(l.out, "credit %d: %d cents to user %d, job %d", id, cents, user, job.ID)
	if rand.IntN(3) == 0 {
		twin, err := l.a.Redeliver(ctx, l.c, CreditBalance{CreditID: id, UserID: user, AmountCents: cents}, job)
		if err != nil {
			return err
		}
		fmt.Fprintf(l.out, " — delivered twice at once (job %d): one ledger row", twin.ID)
	}
	fmt.Fprintln(l.out)
	return nil
}

func (l *traffic) image(ctx context.Context) error {
	id, job, err := l.a.UploadImage(ctx, l.c, fmt.Sprintf("ad-%03d.png", l.n))
	if err != nil {
		return err
	}
	fmt.Fprintf(l.out, "image %d uploaded, watermark job %d", id, job.ID)
	if rand.IntN(3) == 0 {
		twin, err := l.a.Redeliver(ctx, l.c, WatermarkImage{ImageID: id}, job)
		if err != nil {
			return err
		}
		fmt.Fprintf(l.out, " — delivered twice at once (job %d): one object", twin.ID)
	}
	fmt.Fprintln(l.out)
	return nil
}

// printSummary prints the jobs by state and kind, the handler calls and
// the effects in the database.
func (a *App) printSummary(ctx context.Context, w io.Writer, db string) error {
	counts, err := a.store.JobCount(ctx, &twicestore.JobCountParams{})
	if err != nil {
		return err
	}
	byKind := map[string]map[twicetype.JobState]int{}
	for _, c := range counts.Counts {
		if byKind[c.Kind] == nil {
			byKind[c.Kind] = map[twicetype.JobState]int{}
		}
		byKind[c.Kind][c.State] += c.Count
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "KIND\tDELIVERIES (this run)\t%s\n", strings.ToUpper(joinStates("\t")))
	for _, k := range Kinds() {
		fmt.Fprintf(tw, "%s\t%d", k.Kind(), a.Deliveries(k.Kind()))
		for _, s := range twicetype.AllJobStates {
			fmt.Fprintf(tw, "\t%d", byKind[k.Kind()][s])
		}
		fmt.Fprintln(tw)
	}
	_ = tw.Flush() // output, as the Fprint calls around it
	var emails, ledger, images int
	err = a.db.QueryRowContext(ctx, `SELECT
		(SELECT COUNT(*) FROM demo_outbox), (SELECT COUNT(*) FROM demo_ledger), (SELECT COUNT(*) FROM demo_images WHERE object_key <> '')`).
		Scan(&emails, &ledger, &images)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "\neffects so far in %s: %d emails in demo_outbox, %d ledger rows, %d images watermarked\n", displayDB(db), emails, ledger, images)
	fmt.Fprintln(w, "`twice demo --once` runs the scripted scenario and checks that every effect converged.")
	return nil
}

func joinStates(sep string) string {
	s := make([]string, len(twicetype.AllJobStates))
	for i, st := range twicetype.AllJobStates {
		s[i] = string(st)
	}
	return strings.Join(s, sep)
}
