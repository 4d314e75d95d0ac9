package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/user"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/ops"
	"github.com/twicejobs/twice/internal/toggles"
	"github.com/twicejobs/twice/twicestore"
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
is off are held, queued and untouched, until it is on again.

Give --file the workers' kill switch file to include it in the states shown.`,
	})
	cmd.PersistentFlags().StringVar(&file, "file", "", "the workers' TOML kill switch file, included in the effective states (a missing file has no toggles)")
	cmd.AddCommand(c.togglesSetCommand(&file), c.togglesUnsetCommand(&file), c.togglesListCommand(&file))
	return cmd
}

func (c *cli) togglesSetCommand(file *string) *cobra.Command {
	var (
		reason, by string
		force      bool
	)
	cmd := &cobra.Command{
		Use:   "set KIND on|off --reason WHY",
		Short: "Switch a kind on or off on every worker, saying why",
		Long: `Switch KIND on or off on every worker, saying why (--reason is required).

KIND must be registered in this binary or handled by a live worker, so a
typo never stores a switch that switches nothing; --force stores it anyway
(for a kind whose workers are not running). Workers read the store's
switches about once a second.`,
		Example: `  twice toggles set email.partner-verification.v1 off --reason "incident 42: smtp provider down"
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
			if !cmd.Flags().Changed("by") {
				by = defaultBy()
			} else if strings.TrimSpace(by) == "" {
				return usagef("--by is empty: name who flips the switch, or leave it out for %s", defaultBy())
			}
			if err := twice.ValidateKind(kind); err != nil {
				return &usageError{err: err}
			}
			store, fileToggles, cat, err := c.openToggles(cmd.Context(), *file)
			if err != nil {
				return err
			}
			defer store.Close()
			if !cat.Known(kind) && !force {
				msg := fmt.Sprintf("kind %q is neither registered in this binary nor handled by a live worker, so the switch would switch nothing", kind)
				if u := toggles.Unknown([]string{kind}, cat.Kinds); len(u) == 1 && u[0].Suggestion != "" {
					msg += "; did you mean " + u[0].Suggestion + "?"
				}
				return usagef("%s (--force stores it anyway, for a kind whose workers are not running)", msg)
			}
			err = store.ToggleSet(cmd.Context(), &twicestore.ToggleSetParams{Toggle: twicetype.Toggle{
				Kind: kind, Enabled: enabled, Reason: reason, By: by, At: time.Now(),
			}})
			if err != nil {
				return err
			}
			fmt.Fprintf(c.stdout, "stored %s %s\n", kind, args[1])
			return c.printEffective(cmd.Context(), store, cat, fileToggles, kind)
		}),
	}
	f := cmd.Flags()
	f.StringVar(&reason, "reason", "", "why the switch is flipped (required), e.g. \"incident 42\"")
	f.StringVar(&by, "by", "", "who flips it (default $USER@hostname)")
	f.BoolVar(&force, "force", false, "store a switch for a kind no live worker handles and this binary does not register")
	return cmd
}

func (c *cli) togglesUnsetCommand(file *string) *cobra.Command {
	return &cobra.Command{
		Use:   "unset KIND",
		Short: "Remove a kind's stored switch: it falls back to the file and its registration default",
		Args:  exactArgs(1, "KIND"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			kind := strings.ToLower(args[0]) // stored keys are lower-cased
			fileToggles, err := loadTogglesFile(*file)
			if err != nil {
				return err
			}
			store, err := c.openStore(cmd.Context(), false)
			if err != nil {
				return err
			}
			defer store.Close()
			res, err := store.ToggleList(cmd.Context(), &twicestore.ToggleListParams{})
			if err != nil {
				return err
			}
			i := slices.IndexFunc(res.Toggles, func(t twicetype.Toggle) bool { return strings.ToLower(t.Kind) == kind })
			if i < 0 {
				msg := fmt.Sprintf("no stored switch for %q: nothing to unset", args[0])
				stored := make([]string, len(res.Toggles))
				for j, t := range res.Toggles {
					stored[j] = t.Kind
				}
				if u := toggles.Unknown([]string{kind}, stored); len(u) == 1 && u[0].Suggestion != "" {
					msg += "; did you mean " + u[0].Suggestion + "?"
				}
				return fmt.Errorf("%s", msg)
			}
			old := res.Toggles[i]
			if err := store.ToggleDelete(cmd.Context(), &twicestore.ToggleDeleteParams{Kind: kind}); err != nil {
				return err
			}
			fmt.Fprintf(c.stdout, "removed the stored switch of %s (was %s by %s at %s: %q)\n",
				old.Kind, onOff(old.Enabled), old.By, formatTime(old.At), old.Reason)
			cat, err := c.loadCatalog(cmd.Context(), store)
			if err != nil {
				return err
			}
			return c.printEffective(cmd.Context(), store, cat, fileToggles, kind)
		}),
	}
}

func (c *cli) togglesListCommand(file *string) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List every known kind's effective switch, and the toggle keys that name no known kind",
		Long: `List every known kind (registered in this binary or handled by a live
worker) with its effective switch, the source that decided it, who set the
store's switch, when and why, and whether the kind is fail-closed ("?" when
this binary does not register it). Then list the toggle keys, in the store
and in --file, that name no known kind: they switch nothing.`,
		Args: unknownSubcommand,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			store, fileToggles, cat, err := c.openToggles(cmd.Context(), *file)
			if err != nil {
				return err
			}
			defer store.Close()
			res, err := store.ToggleList(cmd.Context(), &twicestore.ToggleListParams{})
			if err != nil {
				return err
			}
			rows := ops.ToggleRows(cat, fileToggles, res.Toggles)
			if asJSON {
				return writeJSON(c.stdout, rows)
			}
			printToggleTable(c.stdout, rows, *file)
			return nil
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// loadCatalog is what the CLI knows about kinds: those this binary
// registers (the demo's), which say whether they are fail-closed, and those
// live workers handle.
func (c *cli) loadCatalog(ctx context.Context, store twicestore.Store) (*ops.Catalog, error) {
	return ops.LoadCatalog(ctx, store, c.reg)
}

// printEffective prints kind's effective state after a change.
func (c *cli) printEffective(ctx context.Context, store twicestore.Store, cat *ops.Catalog, file map[string]bool, kind string) error {
	res, err := store.ToggleList(ctx, &twicestore.ToggleListParams{})
	if err != nil {
		return err
	}
	d, stateKnown := cat.Decide(toggles.NewSet(file, res.Toggles), kind)
	var line string
	switch {
	case !stateKnown:
		line = fmt.Sprintf("%s ? (default: this binary does not register it, so it is off only if its workers register it fail-closed)", kind)
	default:
		line = d.String()
		if d.DecidedBy == toggles.SourceFile && d.StoreSet && d.Store.Enabled != d.Enabled {
			line += "; the file's off wins over the store's on"
		}
	}
	poll := twice.TogglePollIntervalDefault
	fmt.Fprintf(c.stdout, "now: %s; workers pick it up within about %s\n", line, poll)
	if !cat.Known(kind) {
		fmt.Fprintf(c.stdout, "note: no live worker handles %s and this binary does not register it: the switch has no effect until a worker for it starts\n", kind)
	}
	return nil
}

// toggleRow is one line of 'toggles ls', and its --json form.
type toggleRow = ops.ToggleRow

// printToggleTable prints the known kinds, then the unknown keys, if any.
func printToggleTable(w io.Writer, rows []toggleRow, file string) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tSTATE\tDECIDED BY\tFAIL-CLOSED\tSTORE\tFILE\tSET BY\tAT\tREASON")
	var unknown []toggleRow
	for _, r := range rows {
		if !r.Known {
			unknown = append(unknown, r)
			continue
		}
		fc := "?"
		if r.FailClosed != nil {
			fc = yesNo(*r.FailClosed)
		}
		by, at, reason := "-", "-", "-"
		if r.Store != nil {
			by, at, reason = r.Store.By, formatTime(r.Store.At), truncate(fmt.Sprintf("%q", r.Store.Reason), 50)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			r.Kind, r.State, r.DecidedBy, fc, storeValue(r.Store), boolValue(r.File), by, at, reason)
	}
	tw.Flush()
	if file == "" {
		fmt.Fprintln(w, "(no --file given: the workers' kill switch file, if any, is not included)")
	}
	if len(unknown) == 0 {
		return
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
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Kind, storeValue(r.Store), boolValue(r.File), hint)
	}
	tw.Flush()
}

// openToggles reads --file, opens the store and loads the kinds it knows:
// what set and ls start from. The caller closes the store.
func (c *cli) openToggles(ctx context.Context, file string) (twicestore.Store, map[string]bool, *ops.Catalog, error) {
	fileToggles, err := loadTogglesFile(file)
	if err != nil {
		return nil, nil, nil, err
	}
	store, err := c.openStore(ctx, false)
	if err != nil {
		return nil, nil, nil, err
	}
	cat, err := c.loadCatalog(ctx, store)
	if err != nil {
		store.Close()
		return nil, nil, nil, err
	}
	return store, fileToggles, cat, nil
}

// loadTogglesFile reads --file, if given.
func loadTogglesFile(path string) (map[string]bool, error) {
	if path == "" {
		return nil, nil
	}
	return toggles.LoadFile(path)
}

// defaultBy is who flips a switch when --by is not given: $USER@hostname.
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

func storeValue(t *ops.StoreToggle) string {
	if t == nil {
		return "-"
	}
	return onOff(t.Enabled)
}
