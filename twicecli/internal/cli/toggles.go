package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/ops"
	"github.com/twicejobs/twice/internal/toggles"
	"github.com/twicejobs/twice/twicetype"
)

func (c *cli) togglesCommand() *cobra.Command {
	var file string
	cmd := group(&cobra.Command{
		Use:   "toggles",
		Short: "Kill switches: turn a job kind off (or a fail-closed one on) on every worker",
		Long: `Kill switches: turn a job kind off, or a fail-closed one on, on every worker.

A kind is off if any source says off (the store, set here, or the workers'
TOML kill switch file), else on if any source says on, else its registration
default: on, unless the kind is registered fail-closed. Jobs of a kind that
is off are held, queued and untouched, until it is on again. A switch may
expire; every change is kept in the switch history.

The kinds known are this binary's and those in the catalog every worker
publishes to the store, which says whether each is fail-closed. Give
--file the workers' kill switch file to include it in the states shown.`,
	})
	cmd.PersistentFlags().StringVar(&file, "file", "", "the workers' TOML kill switch file, included in the effective states (a missing file has no toggles)")
	cmd.AddCommand(c.togglesSetCommand(&file), c.togglesUnsetCommand(&file), c.togglesListCommand(&file), c.togglesHistoryCommand())
	return cmd
}

func (c *cli) togglesSetCommand(file *string) *cobra.Command {
	var (
		reason, by, expires string
		force               bool
	)
	cmd := &cobra.Command{
		Use:   "set KIND on|off --reason WHY [--expires TIME|DURATION]",
		Short: "Switch a kind on or off on every worker, saying why",
		Long: `Switch KIND on or off on every worker, saying why (--reason is required).

KIND must be registered in this binary or in the catalog the workers
publish, so a typo never stores a switch that switches nothing; --force
stores it anyway (for a kind whose workers have never run). With --expires
the switch stops counting at that time and the kind follows its other
sources again. Workers read the store's switches about once a second.`,
		Example: `  twice toggles set email.partner-verification.v1 off --reason "incident 42: smtp provider down"
  twice toggles set email.partner-verification.v1 off --expires 2h --reason "smtp maintenance window"
  twice toggles set balance.credit.v1 on --reason "ledger migrated" --by ops@example.com`,
		Args: exactArgs(2, "KIND and on|off"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			kind := args[0]
			var enabled bool
			switch args[1] {
			case "on":
				enabled = true
			case "off":
			default:
				return usagef("%q is not a switch state: say on or off", args[1])
			}
			if strings.TrimSpace(reason) == "" {
				return usagef(`--reason is required: say why the switch is flipped, e.g. --reason "incident 42: smtp down"`)
			}
			who, err := byFlag(cmd, by)
			if err != nil {
				return err
			}
			if err := twice.ValidateKind(kind); err != nil {
				return &usageError{err: err}
			}
			exp, err := parseUntil("--expires", expires, time.Now())
			if err != nil {
				return err
			}
			fileToggles, err := loadTogglesFile(*file)
			if err != nil {
				return err
			}
			client, done, err := c.openClient(cmd)
			if err != nil {
				return err
			}
			defer done()
			err = client.ToggleSet(cmd.Context(), &twice.ToggleSetParams{
				Kind: kind, Enabled: enabled, By: who, Reason: reason, ExpiresAt: exp, Force: force,
			})
			if errors.Is(err, twice.ErrUnknownKind) {
				return &usageError{err: withFlagHint(err, "Force", "--force")}
			}
			if err != nil {
				return err
			}
			line := fmt.Sprintf("stored %s %s", kind, args[1])
			if !exp.IsZero() {
				line += " until " + formatTime(exp)
			}
			fmt.Fprintln(c.stdout, line)
			return c.printEffective(cmd.Context(), client, fileToggles, kind)
		}),
	}
	f := cmd.Flags()
	f.StringVar(&reason, "reason", "", "why the switch is flipped (required), e.g. \"incident 42\"")
	f.StringVar(&by, "by", "", "who flips it (default $USER@hostname)")
	f.StringVar(&expires, "expires", "", "the switch stops counting at this time (RFC 3339) or after this duration (e.g. 2h), at most 10 years ahead; without it, never")
	f.BoolVar(&force, "force", false, "store a switch for a kind that is in no catalog and not registered in this binary")
	return cmd
}

func (c *cli) togglesUnsetCommand(file *string) *cobra.Command {
	var reason, by string
	cmd := &cobra.Command{
		Use:   "unset KIND",
		Short: "Remove a kind's stored switch: it falls back to the file and its registration default",
		Args:  exactArgs(1, "KIND"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			who, err := byFlag(cmd, by)
			if err != nil {
				return err
			}
			fileToggles, err := loadTogglesFile(*file)
			if err != nil {
				return err
			}
			client, done, err := c.openClient(cmd)
			if err != nil {
				return err
			}
			defer done()
			old, err := client.ToggleUnset(cmd.Context(), &twice.ToggleUnsetParams{Kind: args[0], By: who, Reason: reason})
			if err != nil {
				return err
			}
			fmt.Fprintf(c.stdout, "removed the stored switch of %s (was %s by %s at %s: %q)\n",
				old.Kind, onOff(old.Enabled), old.By, formatTime(old.At), old.Reason)
			return c.printEffective(cmd.Context(), client, fileToggles, strings.ToLower(args[0]))
		}),
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why the switch is removed, kept in the switch history")
	cmd.Flags().StringVar(&by, "by", "", "who removes it (default $USER@hostname)")
	return cmd
}

// toggleJSON is one row of 'toggles ls --json': a known kind, or a toggle
// key that names none.
type toggleJSON struct {
	// Kind is the kind, or the unknown key, lower-cased.
	Kind string `json:"kind"`
	// Known reports a kind this binary registers or the catalog holds; an
	// unknown key switches nothing.
	Known bool `json:"known"`
	// State is on or off; empty for an unknown key.
	State string `json:"state,omitempty"`
	// DecidedBy is file, store or default; empty for an unknown key.
	DecidedBy string `json:"decided_by,omitempty"`
	// FailClosed is null for an unknown key.
	FailClosed *bool `json:"fail_closed"`
	// Registered: this binary registers the kind. Catalogued: a worker
	// published it; LastSeen is when. Live: within the node liveness window.
	Registered bool       `json:"registered"`
	Catalogued bool       `json:"catalogued"`
	Live       bool       `json:"live"`
	LastSeen   *time.Time `json:"last_seen,omitempty"`
	// File is the file's value for the kind, null when it has no key.
	File *bool `json:"file"`
	// Store is the store's switch in force, null when there is none.
	Store *storeToggleJSON `json:"store"`
	// Suggestion is, for an unknown key, the closest known kind.
	Suggestion string `json:"suggestion,omitempty"`
}

// storeToggleJSON is a switch in the store.
type storeToggleJSON struct {
	Enabled   bool       `json:"enabled"`
	By        string     `json:"by"`
	Reason    string     `json:"reason"`
	At        time.Time  `json:"at"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// toggleRows lists the known kinds, sorted, then the unknown keys.
func toggleRows(book *kindBook, file map[string]bool, stored []twicetype.Toggle) []toggleJSON {
	set := toggles.NewSet(file, stored)
	kinds := book.kinds()
	rows := make([]toggleJSON, 0, len(kinds))
	for _, k := range kinds {
		e, _ := book.lookup(k)
		d := set.Decide(k, e.FailClosed)
		fc := e.FailClosed
		r := toggleJSON{
			Kind: k, Known: true, State: onOff(d.Enabled), DecidedBy: string(d.DecidedBy), FailClosed: &fc,
			Registered: e.Registered, Catalogued: !e.LastSeen.IsZero(), Live: e.Live, LastSeen: timePtr(e.LastSeen),
		}
		fillToggleSources(&r, d)
		rows = append(rows, r)
	}
	for _, u := range toggles.Unknown(set.Keys(), kinds) {
		r := toggleJSON{Kind: u.Key, Suggestion: u.Suggestion}
		fillToggleSources(&r, set.Decide(u.Key, false))
		rows = append(rows, r)
	}
	return rows
}

func fillToggleSources(r *toggleJSON, d toggles.Decision) {
	if d.FileSet {
		v := d.FileEnabled
		r.File = &v
	}
	if d.StoreSet {
		r.Store = &storeToggleJSON{Enabled: d.Store.Enabled, By: d.Store.By, Reason: d.Store.Reason, At: d.Store.At, ExpiresAt: timePtr(d.Store.ExpiresAt)}
	}
}

func (c *cli) togglesListCommand(file *string) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List every known kind's effective switch and fail-closed flag, and the toggle keys that name no known kind",
		Long: `List every known kind (registered in this binary or published to the
catalog by a worker, live or not) with its effective switch, the source
that decided it, whether it is fail-closed, who set the store's switch,
when, why and until when. Then list the toggle keys, in the store and in
--file, that name no known kind: they switch nothing.`,
		Args: unknownSubcommand,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			fileToggles, err := loadTogglesFile(*file)
			if err != nil {
				return err
			}
			client, done, err := c.openClient(cmd)
			if err != nil {
				return err
			}
			defer done()
			book, err := c.loadKindBook(cmd.Context(), client, false)
			if err != nil {
				return err
			}
			stored, err := client.ToggleList(cmd.Context())
			if err != nil {
				return err
			}
			rows := toggleRows(book, fileToggles, stored)
			if asJSON {
				return writeJSON(c.stdout, rows)
			}
			return printToggleTable(c.stdout, rows, *file)
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// toggleChangeJSON is one change of 'toggles history --json'.
type toggleChangeJSON struct {
	ID        int64      `json:"id"`
	Kind      string     `json:"kind"`
	Previous  string     `json:"previous"`
	New       string     `json:"new"`
	By        string     `json:"by"`
	Reason    string     `json:"reason"`
	Source    string     `json:"source"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	At        time.Time  `json:"at"`
}

func (c *cli) togglesHistoryCommand() *cobra.Command {
	var (
		asJSON bool
		limit  int
		before int64
	)
	cmd := &cobra.Command{
		Use:   "history KIND",
		Short: "Show who flipped a kind's stored switch, when, why, from what to what; newest first",
		Example: `  twice toggles history email.partner-verification.v1
  twice toggles history balance.credit.v1 --json --limit 10`,
		Args: exactArgs(1, "KIND"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			if limit < 1 || limit > twice.JobListLimitMax {
				return usagef("--limit %d: use a number from 1 to %d", limit, twice.JobListLimitMax)
			}
			if before < 0 {
				return usagef("--before %d: use a change id", before)
			}
			client, done, err := c.openClient(cmd)
			if err != nil {
				return err
			}
			defer done()
			res, err := client.ToggleHistory(cmd.Context(), &twice.ToggleHistoryParams{Kind: args[0], BeforeID: before, Limit: limit})
			if err != nil {
				return err
			}
			if asJSON {
				out := make([]toggleChangeJSON, len(res.Changes))
				for i, ch := range res.Changes {
					out[i] = toggleChangeJSON{ID: ch.ID, Kind: ch.Kind, Previous: string(ch.Previous), New: string(ch.New),
						By: ch.By, Reason: ch.Reason, Source: ch.Source, ExpiresAt: timePtr(ch.ExpiresAt), At: ch.At}
				}
				return writeJSON(c.stdout, out)
			}
			if len(res.Changes) == 0 {
				fmt.Fprintf(c.stdout, "%s: no switch changes recorded\n", args[0])
				return nil
			}
			tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tAT\tCHANGE\tBY\tSOURCE\tEXPIRES\tREASON")
			for _, ch := range res.Changes {
				exp := "-"
				if !ch.ExpiresAt.IsZero() {
					exp = formatTime(ch.ExpiresAt)
				}
				fmt.Fprintf(tw, "%d\t%s\t%s → %s\t%s\t%s\t%s\t%s\n", ch.ID, formatTime(ch.At), ch.Previous, ch.New,
					terminalText(ch.By), terminalText(ch.Source), exp, truncate(fmt.Sprintf("%q", ch.Reason), 60))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if res.Next != 0 {
				fmt.Fprintf(c.stderr, "more may follow: add --before %d\n", res.Next)
			}
			return nil
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().IntVar(&limit, "limit", 50, "show at most this many changes")
	cmd.Flags().Int64Var(&before, "before", 0, "show only changes with a smaller id (the next page)")
	return cmd
}

// printEffective prints kind's effective state after a change.
func (c *cli) printEffective(ctx context.Context, client *twice.Client, file map[string]bool, kind string) error {
	book, err := c.loadKindBook(ctx, client, false)
	if err != nil {
		return err
	}
	stored, err := client.ToggleList(ctx)
	if err != nil {
		return err
	}
	e, known := book.lookup(kind)
	if !known {
		for _, k := range book.kinds() {
			if strings.EqualFold(k, kind) {
				e, known = book.lookup(k)
			}
		}
	}
	d := toggles.NewSet(file, stored).Decide(kind, e.FailClosed)
	line := d.String()
	if d.DecidedBy == toggles.SourceFile && d.StoreSet && d.Store.Enabled != d.Enabled {
		line += "; the file's off wins over the store's on"
	}
	fmt.Fprintf(c.stdout, "now: %s; workers pick it up within about %s\n", line, twice.TogglePollIntervalDefault)
	switch {
	case !known:
		fmt.Fprintf(c.stdout, "note: %s is in no catalog and not registered here: the switch has no effect until a worker for it starts\n", kind)
	case !e.Live && !e.Registered:
		fmt.Fprintf(c.stdout, "note: no live worker handles %s now (last seen %s)\n", kind, formatTime(e.LastSeen))
	}
	return nil
}

// printToggleTable prints the known kinds, then the unknown keys, if any.
func printToggleTable(w io.Writer, rows []toggleJSON, file string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tSTATE\tDECIDED BY\tFAIL-CLOSED\tSTORE\tFILE\tSET BY\tAT\tEXPIRES\tREASON")
	var unknown []toggleJSON
	for _, r := range rows {
		if !r.Known {
			unknown = append(unknown, r)
			continue
		}
		by, at, exp, reason := "-", "-", "-", "-"
		if r.Store != nil {
			by, at, reason = terminalText(r.Store.By), formatTime(r.Store.At), truncate(fmt.Sprintf("%q", r.Store.Reason), 50)
			if r.Store.ExpiresAt != nil {
				exp = formatTime(*r.Store.ExpiresAt)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			terminalText(r.Kind), r.State, r.DecidedBy, yesNo(*r.FailClosed), storeValue(r.Store), boolValue(r.File), by, at, exp, reason)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if file == "" {
		fmt.Fprintln(w, "(no --file given: the workers' kill switch file, if any, is not included)")
	}
	if len(unknown) == 0 {
		return nil
	}
	fmt.Fprintf(w, "\n%d toggle %s no known kind, so %s nothing:\n", len(unknown),
		plural(len(unknown), "key names", "keys name"), plural(len(unknown), "it switches", "they switch"))
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tSTORE\tFILE\tSUGGESTION")
	for _, r := range unknown {
		hint := "-"
		if r.Suggestion != "" {
			hint = "did you mean " + r.Suggestion + "?"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", terminalText(r.Kind), storeValue(r.Store), boolValue(r.File), terminalText(hint))
	}
	return tw.Flush()
}

// withFlagHint rewrites an admin API error's advice to name the CLI's flag
// (--force) where the API names its field (Force).
func withFlagHint(err error, field, flag string) error {
	msg := err.Error()
	if strings.Contains(msg, "("+field+" ") {
		return errors.New(strings.Replace(msg, "("+field+" ", "("+flag+" ", 1))
	}
	return fmt.Errorf("%w (%s stores it anyway)", err, flag)
}

// loadTogglesFile reads --file, if given.
func loadTogglesFile(path string) (map[string]bool, error) {
	if path == "" {
		return nil, nil
	}
	return toggles.LoadFile(path)
}

// defaultBy is who acts when --by is not given: $USER@hostname.
func defaultBy() string {
	name := os.Getenv("USER")
	if name == "" {
		if u, err := user.Current(); err == nil {
			name = u.Username
		}
	}
	if name == "" {
		name = "unknown"
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		return name
	}
	return name + "@" + host
}

func onOff(on bool) string { return ops.OnOff(on) }

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func boolValue(b *bool) string {
	if b == nil {
		return "-"
	}
	return onOff(*b)
}

func storeValue(t *storeToggleJSON) string {
	if t == nil {
		return "-"
	}
	return onOff(t.Enabled)
}
