package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/twicejobs/twice"
)

func (c *cli) limitsCommand() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "limits",
		Short: "Flow control: each limited kind's limits, slots in use and throttled jobs",
	})
	cmd.AddCommand(c.limitsListCommand())
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
}

func newLimitJSON(u twice.LimitUsage) limitJSON {
	return limitJSON{
		Kind: u.Kind, GlobalConcurrency: u.Limit.Global, KeyConcurrency: u.Limit.PerKey,
		KeyOrderSkipsRetries: u.Limit.KeyOrderSkipsRetries,
		RateLimit:            newRateJSON(u.Limit.Rate), KeyRateLimit: newRateJSON(u.Limit.KeyRate),
		Running: u.Running, Due: u.Due, Throttled: u.Throttled,
		Keys: u.Keys, BusyKeys: u.BusyKeys, RateUsed: u.RateUsed,
	}
}

func (c *cli) limitsListCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List the limited kinds: limits, running jobs against the slots, throttled jobs, busy keys, rate used",
		Long: `List every kind this binary registers with a limit (KindOpts.GlobalConcurrency,
KeyConcurrency, RateLimit, KeyRateLimit): its limits, its running jobs
against the global slots, its due jobs and how many of those a limit holds
back. Throttled jobs wait for a slot or for the rate window and start once
one frees: they are neither orphaned nor stuck. Busy keys are the
concurrency keys with a running job, of the keys with unfinished jobs;
rate used counts the starts in the current rate window.

The limits are the registry's: a binary built without the kinds (the
stock 'twice') knows no limits and lists none.`,
		Args: unknownSubcommand,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			return printList(c, cmd, asJSON, listing[twice.LimitUsage, limitJSON]{
				list: (*twice.Client).LimitList, toJSON: newLimitJSON,
				empty:  "no limited kinds: this binary registers no kind with a concurrency or rate limit",
				header: "KIND\tLIMITS\tRUNNING/SLOTS\tDUE\tTHROTTLED\tBUSY KEYS\tRATE USED",
				row:    limitRow,
			})
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
	fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\n", terminalText(u.Kind), strings.Join(u.Limit.Phrases(), ", "), slots, u.Due, u.Throttled, keys, rate)
}
