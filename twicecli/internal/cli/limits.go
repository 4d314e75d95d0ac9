package cli

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicetype"
)

func (c *cli) limitsCommand() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "limits",
		Short: "Flow control: each limited kind's limits, slots in use and throttled jobs; change them at runtime",
	})
	cmd.AddCommand(c.limitsListCommand(), c.limitsSetCommand(), c.limitsResetCommand(), c.limitsHistoryCommand())
	return cmd
}

// rateJSON is a rate limit as 'limits ls --json' prints it: at most Limit
// starts in any window of Period (a Go duration, e.g. "1s" or "1h").
type rateJSON struct {
	Limit  int    `json:"limit"`
	Period string `json:"period"`
}

func newRateJSON(r twice.RateLimit) *rateJSON {
	if r.IsZero() {
		return nil
	}
	return &rateJSON{Limit: r.Limit, Period: r.PeriodText()}
}

// limitJSON is one limited kind as 'limits ls --json' prints it. A limit
// of 0 and an absent rate are no limit.
type limitJSON struct {
	Kind              string `json:"kind"`
	GlobalConcurrency int    `json:"global_concurrency"`
	KeyConcurrency    int    `json:"key_concurrency"`
	// KeyOrderSkipsRetries: a job of a key waiting for its retry does not
	// hold back the key's later jobs (KindOpts.KeyOrderSkipsRetries).
	KeyOrderSkipsRetries bool      `json:"key_order_skips_retries"`
	RateLimit            *rateJSON `json:"rate_limit,omitempty"`
	KeyRateLimit         *rateJSON `json:"key_rate_limit,omitempty"`
	Running              int       `json:"running"`
	Due                  int       `json:"due"`
	// Throttled counts the due jobs a limit holds back: they wait for a
	// slot, and are neither orphaned nor stuck.
	Throttled int `json:"throttled"`
	Keys      int `json:"keys"`
	BusyKeys  int `json:"busy_keys"`
	RateUsed  int `json:"rate_used"`
	// Compiled is the kind's limits as registered; the fields above are
	// those in force, the override's when Override is set.
	Compiled *limitSettingJSON `json:"compiled"`
	// Override is the runtime override in force ('limits set'), null for
	// none.
	Override *overrideJSON `json:"override"`
}

// overrideJSON says who set a runtime override, when and why.
type overrideJSON struct {
	By     string    `json:"by"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}

func newLimitJSON(u twice.LimitUsage) limitJSON {
	return limitJSON{
		Kind: u.Kind, GlobalConcurrency: u.Limit.Global, KeyConcurrency: u.Limit.PerKey,
		KeyOrderSkipsRetries: u.Limit.KeyOrderSkipsRetries,
		RateLimit:            newRateJSON(u.Limit.Rate), KeyRateLimit: newRateJSON(u.Limit.KeyRate),
		Running: u.Running, Due: u.Due, Throttled: u.Throttled,
		Keys: u.Keys, BusyKeys: u.BusyKeys, RateUsed: u.RateUsed,
		Compiled: newLimitSettingJSON(twicetype.LimitScopeKind, &twicetype.LimitSetting{Limit: u.Compiled}),
		Override: newOverrideJSON(u.Override),
	}
}

func newOverrideJSON(o *twice.LimitOverride) *overrideJSON {
	if o == nil {
		return nil
	}
	return &overrideJSON{By: o.By, Reason: o.Reason, At: o.At}
}

func (c *cli) limitsListCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List the limited kinds: limits, running jobs against the slots, throttled jobs, busy keys, rate used",
		Long: `List every limited kind (KindOpts.GlobalConcurrency, KeyConcurrency,
RateLimit, KeyRateLimit): its limits in force, its running jobs against the
global slots, its due jobs and how many of those a limit holds back.
Throttled jobs wait for a slot or for the rate window and start once one
frees: they are neither orphaned nor stuck. Busy keys are the concurrency
keys with a running job, of the keys with unfinished jobs; rate used
counts the starts in the current rate window.

The limits are this binary's registry's and those live workers publish in
the kind catalog, so the stock 'twice' lists a team's kinds too. A kind
whose limits were changed at runtime ('limits set') shows its override,
who set it and when, and its compiled limits; the queues whose
concurrency was changed ('queues scale') follow the table.`,
		Args: unknownSubcommand,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			if err := printList(c, cmd, asJSON, listing[twice.LimitUsage, limitJSON]{
				list: (*twice.Client).LimitList, toJSON: newLimitJSON,
				empty:  "no limited kinds: no kind registered here or published by a live worker has a concurrency or rate limit",
				header: "KIND\tLIMITS\tRUNNING/SLOTS\tDUE\tTHROTTLED\tBUSY KEYS\tRATE USED\tOVERRIDE",
				row:    limitRow,
			}); err != nil || asJSON {
				return err
			}
			return c.printQueueOverrides(cmd)
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// limitRow is one limited kind's line in 'limits ls'.
func limitRow(tw io.Writer, u twice.LimitUsage) {
	slots := fmt.Sprintf("%d/-", u.Running)
	if u.Limit.Global > 0 {
		slots = fmt.Sprintf("%d/%d", u.Running, u.Limit.Global)
	}
	keys := "-"
	if u.Limit.PerKey > 0 || !u.Limit.KeyRate.IsZero() {
		keys = fmt.Sprintf("%d of %d", u.BusyKeys, u.Keys)
	}
	rate := "-"
	if r := u.Limit.Rate; !r.IsZero() {
		rate = fmt.Sprintf("%d/%d per %s", u.RateUsed, r.Limit, r.PeriodText())
	}
	override := "-"
	if o := u.Override; o != nil {
		override = fmt.Sprintf("by %s at %s (compiled: %s) %s", terminalText(o.By), formatTime(o.At),
			twicetype.LimitSetting{Limit: u.Compiled}.Text(twicetype.LimitScopeKind), truncate(fmt.Sprintf("%q", o.Reason), 40))
	}
	limits := twicetype.LimitSetting{Limit: u.Limit}.Text(twicetype.LimitScopeKind)
	fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", terminalText(u.Kind), limits, slots, u.Due, u.Throttled, keys, rate, override)
}

// printQueueOverrides prints, after 'limits ls', the queues whose
// concurrency an override sets.
func (c *cli) printQueueOverrides(cmd *cobra.Command) error {
	client, done, err := c.openClient(cmd)
	if err != nil {
		return err
	}
	defer done()
	overrides, err := client.LimitOverrideList(cmd.Context())
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	header := false
	for _, o := range overrides {
		if o.Scope != twicetype.LimitScopeQueue {
			continue
		}
		if !header {
			fmt.Fprintln(c.stdout)
			fmt.Fprintln(tw, "QUEUE\tCONCURRENCY (EACH WORKER)\tBY\tAT\tREASON")
			header = true
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", terminalText(o.Name), o.Concurrency, terminalText(o.By), formatTime(o.At),
			truncate(fmt.Sprintf("%q", o.Reason), 60))
	}
	return tw.Flush()
}
