package demo

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicetype"
)

// KindReport sums up one kind over a scenario.
type KindReport struct {
	Kind     string
	Strategy twice.Strategy
	// Messages is the number of distinct messages (message ids) enqueued.
	Messages int
	// Jobs is the number of jobs: messages plus redeliveries.
	Jobs int
	// Deliveries is the number of handler calls; the strategy skips the
	// handler for a message already processed.
	Deliveries int64
	// Effects is what the kind left behind: emails in the sink, ledger
	// rows, objects written.
	Effects int
	// Promise is what the strategy promises of the effects here.
	Promise string
}

// Report is the outcome of RunOnce.
type Report struct {
	// Faults lists what was injected, and what each should come to.
	Faults []string
	// Kinds sums up each kind.
	Kinds []KindReport
	// Divergences lists every effect that is not what its strategy
	// promises, and every job that did not complete. Empty means the
	// scenario converged.
	Divergences []string
}

// Converged reports whether every effect is what its strategy promises.
func (r *Report) Converged() bool { return len(r.Divergences) == 0 }

// Print writes the report for a reader.
func (r *Report) Print(w io.Writer) {
	fmt.Fprintln(w, "\nfaults injected and cases covered:")
	for _, f := range r.Faults {
		fmt.Fprintf(w, "  - %s\n", f)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tSTRATEGY\tMESSAGES\tJOBS\tDELIVERIES\tEFFECTS\tPROMISE")
	for _, k := range r.Kinds {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%s\n", k.Kind, k.Strategy, k.Messages, k.Jobs, k.Deliveries, k.Effects, k.Promise)
	}
	_ = tw.Flush() // output, as the Fprint calls around it
	fmt.Fprintln(w)
	if r.Converged() {
		fmt.Fprintln(w, "converged: every effect is what its strategy promises")
		return
	}
	fmt.Fprintf(w, "DIVERGED: %d problems\n", len(r.Divergences))
	for _, d := range r.Divergences {
		fmt.Fprintf(w, "  - %s\n", d)
	}
}

// check compares what the scenario left in the database and the objects
// directory with what each strategy promises for the plan.
func (a *App) check(ctx context.Context, p *plan) (*Report, error) {
	r := &Report{Faults: p.faults}
	jobs, err := a.jobs(ctx, p.jobIDs)
	if err != nil {
		return nil, err
	}
	for _, j := range jobs {
		if j.State != twicetype.JobStateCompleted {
			r.diverge("job %d (%s) ended %s, not completed: %s", j.ID, j.Kind, j.State, lastError(j))
		}
	}
	checks := []func(context.Context, *plan, *Report) (KindReport, error){a.checkEmails, a.checkCredits, a.checkImages}
	for _, check := range checks {
		k, err := check(ctx, p, r)
		if err != nil {
			return nil, err
		}
		messages := map[string]bool{}
		for _, j := range jobs {
			if j.Kind == k.Kind {
				k.Jobs++
				messages[j.MessageID] = true
			}
		}
		k.Messages = len(messages)
		k.Deliveries = a.Deliveries(k.Kind)
		r.Kinds = append(r.Kinds, k)
	}
	return r, nil
}

func (r *Report) diverge(format string, args ...any) {
	r.Divergences = append(r.Divergences, fmt.Sprintf(format, args...))
}

func lastError(j *twicetype.JobRow) string {
	if len(j.Errors) == 0 {
		return "no error recorded"
	}
	return j.Errors[len(j.Errors)-1].Error
}

// checkEmails: ClaimAfter promises at least one email per message to a
// live, unconfirmed user, and at most one more per crash between send and
// claim; a deleted or confirmed user gets none.
func (a *App) checkEmails(ctx context.Context, p *plan, r *Report) (KindReport, error) {
	k := KindReport{Kind: VerificationEmail{}.Kind(), Strategy: twice.ClaimAfter}
	want, crashes := 0, 0
	for _, u := range p.users {
		var n int
		if err := a.db.QueryRowContext(ctx, a.q(`SELECT COUNT(*) FROM demo_outbox WHERE user_id = $1`), u.id).Scan(&n); err != nil {
			return k, fmt.Errorf("count emails: %w", err)
		}
		k.Effects += n
		switch {
		case u.fate != live:
			if n != 0 {
				r.diverge("%d emails to %s, who was %s before the send: want 0", n, u.name, u.fate)
			}
			continue
		case n == 0:
			r.diverge("no email to %s: the message was lost", u.name)
		}
		allowed := 1
		if u.fault == crashed {
			allowed, crashes = 2, crashes+1
		}
		want++
		if n > allowed {
			r.diverge("%d emails to %s: at most %d allowed (one, plus one per injected crash)", n, u.name, allowed)
		}
	}
	if fired := a.faults.CrashesFired(); fired != crashes {
		r.diverge("%d crashes between send and claim were armed but %d happened", crashes, fired)
	}
	k.Promise = fmt.Sprintf("%d to %d emails: 1 per live unconfirmed user, +1 at most per injected crash", want, want+crashes)
	return k, nil
}

// checkCredits: Transactional promises exactly one ledger row per credit
// to a live user (none for a deleted one), and balances that add up.
func (a *App) checkCredits(ctx context.Context, p *plan, r *Report) (KindReport, error) {
	k := KindReport{Kind: CreditBalance{}.Kind(), Strategy: twice.Transactional}
	want := 0
	balances := map[int64]int64{}
	for _, c := range p.credits {
		var n int
		if err := a.db.QueryRowContext(ctx, a.q(`SELECT COUNT(*) FROM demo_ledger WHERE credit_id = $1`), c.id).Scan(&n); err != nil {
			return k, fmt.Errorf("count ledger rows: %w", err)
		}
		k.Effects += n
		expect := 1
		if u := p.user(c.userID); u != nil && u.fate == deleted {
			expect = 0
		}
		want += expect
		balances[c.userID] += int64(expect) * c.cents
		if n != expect {
			r.diverge("credit %d has %d ledger rows: want exactly %d", c.id, n, expect)
		}
	}
	for _, u := range p.users {
		var cents int64
		err := a.db.QueryRowContext(ctx, a.q(`SELECT COALESCE((SELECT cents FROM demo_balances WHERE user_id = $1), 0)`), u.id).Scan(&cents)
		if err != nil {
			return k, fmt.Errorf("read balance: %w", err)
		}
		if cents != balances[u.id] {
			r.diverge("balance of %s is %d cents: want %d", u.name, cents, balances[u.id])
		}
	}
	k.Promise = fmt.Sprintf("exactly %d ledger rows: 1 per credit to a live user, balances adding up", want)
	return k, nil
}

// checkImages: None promises, for an effect idempotent by key, exactly one
// object per image, at the content address of its watermark.
func (a *App) checkImages(ctx context.Context, p *plan, r *Report) (KindReport, error) {
	k := KindReport{Kind: WatermarkImage{}.Kind(), Strategy: twice.None}
	objects, err := a.objectsByImage()
	if err != nil {
		return k, err
	}
	for _, img := range p.images {
		var (
			source []byte
			stored string
		)
		err := a.db.QueryRowContext(ctx, a.q(`SELECT source, object_key FROM demo_images WHERE id = $1`), img.id).Scan(&source, &stored)
		if err != nil {
			return k, fmt.Errorf("load image %d: %w", img.id, err)
		}
		keys := objects[img.id]
		k.Effects += len(keys)
		want := objectKey(watermarked(img.id, source))
		switch {
		case len(keys) != 1:
			r.diverge("image %d has %d watermarked objects: want exactly 1 (%s)", img.id, len(keys), strings.Join(keys, ", "))
		case keys[0] != want:
			r.diverge("image %d's object is %s: want %s", img.id, keys[0], want)
		}
		if stored != want {
			r.diverge("image %d records object %q: want %q", img.id, stored, want)
		}
	}
	k.Promise = fmt.Sprintf("exactly %d objects: 1 per image, content-addressed", len(p.images))
	return k, nil
}

// objectsByImage reads the objects directory: the keys of the objects each
// image has, from the header every watermark starts with.
func (a *App) objectsByImage() (map[int64][]string, error) {
	out := map[int64][]string{}
	err := filepath.WalkDir(a.objects, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasPrefix(d.Name(), ".tmp-") {
			return err
		}
		id, err := objectImage(path)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(a.objects, path)
		if err != nil {
			return err
		}
		out[id] = append(out[id], filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read objects: %w", err)
	}
	return out, nil
}

func objectImage(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer func() { _ = f.Close() }()
	line, err := bufio.NewReader(f).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, err
	}
	rest, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), watermarkHeader)
	if !ok {
		return 0, fmt.Errorf("object %s is not a demo watermark", path)
	}
	return strconv.ParseInt(rest, 10, 64)
}
