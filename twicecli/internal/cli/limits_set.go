package cli

import (
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicetype"
)

// The runtime overrides: 'limits set', 'limits reset', 'limits history'
// and 'queues scale'.

// parseRate reads a --rate or --key-rate (twice.ParseRateLimit).
func parseRate(flag, s string) (twice.RateLimit, error) {
	r, err := twice.ParseRateLimit(s)
	if err != nil {
		return r, usagef("%s %v", flag, err)
	}
	return r, nil
}

// requireReason refuses an empty --reason: every runtime override says
// why, for the limit history.
func requireReason(reason, what string) error {
	if strings.TrimSpace(reason) == "" {
		return usagef(`--reason is required: say why the %s, e.g. --reason "incident 42: provider throttling us"`, what)
	}
	return nil
}

func (c *cli) limitsSetCommand() *cobra.Command {
	var (
		reason, by, rate, keyRate string
		global, perKey            int
	)
	cmd := &cobra.Command{
		Use:   "set KIND [--global N] [--per-key N] [--rate N/PERIOD] [--key-rate N/PERIOD] --reason WHY",
		Short: "Override a kind's limits on every worker, at runtime, saying why",
		Long: `Override KIND's limits on every worker without a deploy: the flags given
replace those limits, the others keep their value in force; 0 lifts a
limit. Workers apply it at their next read of the kill switches (within
about a second; at once on PostgreSQL). Running jobs go on: only new starts
follow it. 'limits reset' goes back to the compiled limits, which stay the
default; 'limits history' says who changed what, when and why.

KIND must be registered in this binary or published by a live worker, and
a per-key limit needs a kind whose jobs carry a concurrency key.`,
		Example: `  twice limits set email.send.v1 --global 3 --reason "smtp provider throttling us"
  twice limits set report.render.v1 --rate 10/1m --reason "incident 42"
  twice limits set email.send.v1 --global 0 --reason "provider fixed: no limit"`,
		Args: exactArgs(1, "KIND"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			if err := requireReason(reason, "limit changes"); err != nil {
				return err
			}
			who, err := byFlag(cmd, by)
			if err != nil {
				return err
			}
			p := &twice.LimitSetParams{Kind: args[0], By: who, Reason: reason}
			f := cmd.Flags()
			for _, n := range []struct {
				flag  string
				value int
				dest  **int
			}{{"global", global, &p.Global}, {"per-key", perKey, &p.PerKey}} {
				if !f.Changed(n.flag) {
					continue
				}
				if n.value < 0 {
					return usagef("--%s %d is negative: give a positive number, or 0 for no limit", n.flag, n.value)
				}
				*n.dest = &n.value
			}
			for _, r := range []struct {
				flag, value string
				dest        **twice.RateLimit
			}{{"rate", rate, &p.Rate}, {"key-rate", keyRate, &p.KeyRate}} {
				if !f.Changed(r.flag) {
					continue
				}
				rl, err := parseRate("--"+r.flag, r.value)
				if err != nil {
					return err
				}
				*r.dest = &rl
			}
			if p.Global == nil && p.PerKey == nil && p.Rate == nil && p.KeyRate == nil {
				return usagef("nothing to set: give --global, --per-key, --rate or --key-rate")
			}
			client, done, err := c.openClient(cmd)
			if err != nil {
				return err
			}
			defer done()
			res, err := client.LimitSet(cmd.Context(), p)
			if err != nil {
				return err
			}
			fmt.Fprintf(c.stdout, "kind %s: limits now %s (was %s); workers apply it within about a second\n",
				res.Override.Name, res.Override.Text(twicetype.LimitScopeKind), previousText(res, "its compiled limits"))
			return nil
		}),
	}
	f := cmd.Flags()
	f.IntVar(&global, "global", 0, "the most jobs of the kind running at once across every node (0: no limit)")
	f.IntVar(&perKey, "per-key", 0, "the most jobs of one concurrency key running at once (0: no limit)")
	f.StringVar(&rate, "rate", "", "the most starts of the kind per period: N/PERIOD, e.g. 100/1s (0: no limit)")
	f.StringVar(&keyRate, "key-rate", "", "the most starts of one key per period: N/PERIOD (0: no limit)")
	f.StringVar(&reason, "reason", "", "why the limits change (required), kept in the limit history")
	f.StringVar(&by, "by", "", "who changes them (default $USER@hostname)")
	return cmd
}

// previousText is what an override replaced, in words.
func previousText(res *twice.LimitOverrideResult, none string) string {
	if res.Previous == nil {
		return none
	}
	return fmt.Sprintf("%s, set by %s at %s", res.Previous.Text(res.Previous.Scope), terminalText(res.Previous.By), formatTime(res.Previous.At))
}

func (c *cli) limitsResetCommand() *cobra.Command {
	var reason, by string
	cmd := &cobra.Command{
		Use:   "reset KIND --reason WHY",
		Short: "Remove a kind's limit override: every worker goes back to its compiled limits",
		Args:  exactArgs(1, "KIND"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			if err := requireReason(reason, "limits are reset"); err != nil {
				return err
			}
			who, err := byFlag(cmd, by)
			if err != nil {
				return err
			}
			client, done, err := c.openClient(cmd)
			if err != nil {
				return err
			}
			defer done()
			res, err := client.LimitReset(cmd.Context(), &twice.LimitResetParams{Kind: args[0], By: who, Reason: reason})
			if err != nil {
				return err
			}
			fmt.Fprintf(c.stdout, "kind %s: override removed (was %s); back to its compiled limits\n",
				res.Override.Name, previousText(res, "none"))
			return nil
		}),
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why the override is removed (required)")
	cmd.Flags().StringVar(&by, "by", "", "who removes it (default $USER@hostname)")
	return cmd
}

func (c *cli) queuesScaleCommand() *cobra.Command {
	var reason, by string
	cmd := &cobra.Command{
		Use:   "scale QUEUE N|reset --reason WHY",
		Short: "Set how many jobs of a queue each worker runs at once, at runtime; reset goes back to the config",
		Long: `Override QUEUE's concurrency on every worker that works it: each runs at
most N of its jobs at once (a worker's MaxWorkers still bounds all its
queues, unless left to its default, which follows). Lowered, the running
jobs finish and fewer start; raised, more start at once. Workers apply it
within about a second (at once on PostgreSQL). 'reset' goes back to each
worker's Config.Queues value.`,
		Example: `  twice queues scale bulk 2 --reason "database under load"
  twice queues scale bulk reset --reason "load back to normal"`,
		Args: exactArgs(2, "QUEUE and N|reset"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			if err := requireReason(reason, "queue is scaled"); err != nil {
				return err
			}
			who, err := byFlag(cmd, by)
			if err != nil {
				return err
			}
			queue := args[0]
			var n int
			if args[1] != "reset" {
				if n, err = strconv.Atoi(args[1]); err != nil || n < 1 || n > twice.QueueConcurrencyMax {
					return usagef("%q is not a concurrency: give a number from 1 to %d, or reset", args[1], twice.QueueConcurrencyMax)
				}
			}
			client, done, err := c.openClient(cmd)
			if err != nil {
				return err
			}
			defer done()
			if n == 0 {
				res, err := client.QueueConcurrencyReset(cmd.Context(), &twice.QueueConcurrencyResetParams{Queue: queue, By: who, Reason: reason})
				if err != nil {
					return err
				}
				fmt.Fprintf(c.stdout, "queue %s: override removed (was %s); back to each worker's configured concurrency\n",
					queue, previousText(res, "none"))
				return nil
			}
			res, err := client.QueueConcurrencySet(cmd.Context(), &twice.QueueConcurrencySetParams{Queue: queue, Concurrency: n, By: who, Reason: reason})
			if err != nil {
				return err
			}
			fmt.Fprintf(c.stdout, "queue %s: concurrency now %d on each worker (was %s); workers apply it within about a second\n",
				queue, n, previousText(res, "each worker's configured concurrency"))
			return nil
		}),
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why the queue is scaled (required), kept in the limit history")
	cmd.Flags().StringVar(&by, "by", "", "who scales it (default $USER@hostname)")
	return cmd
}

// limitSettingJSON is an override's value in JSON: a kind's limits, or a
// queue's concurrency.
type limitSettingJSON struct {
	GlobalConcurrency    *int      `json:"global_concurrency,omitempty"`
	KeyConcurrency       *int      `json:"key_concurrency,omitempty"`
	KeyOrderSkipsRetries bool      `json:"key_order_skips_retries,omitempty"`
	RateLimit            *rateJSON `json:"rate_limit,omitempty"`
	KeyRateLimit         *rateJSON `json:"key_rate_limit,omitempty"`
	Concurrency          *int      `json:"concurrency,omitempty"`
}

func newLimitSettingJSON(scope twicetype.LimitScope, s *twicetype.LimitSetting) *limitSettingJSON {
	if s == nil {
		return nil
	}
	if scope == twicetype.LimitScopeQueue {
		return &limitSettingJSON{Concurrency: &s.Concurrency}
	}
	l := s.Limit
	return &limitSettingJSON{GlobalConcurrency: &l.Global, KeyConcurrency: &l.PerKey, KeyOrderSkipsRetries: l.KeyOrderSkipsRetries,
		RateLimit: newRateJSON(l.Rate), KeyRateLimit: newRateJSON(l.KeyRate)}
}

// limitChangeJSON is one change of 'limits history --json'. A null
// previous is no override before (the compiled value); a null new is a
// reset.
type limitChangeJSON struct {
	ID       int64             `json:"id"`
	Scope    string            `json:"scope"`
	Name     string            `json:"name"`
	Previous *limitSettingJSON `json:"previous"`
	New      *limitSettingJSON `json:"new"`
	By       string            `json:"by"`
	Reason   string            `json:"reason"`
	At       time.Time         `json:"at"`
}

func (c *cli) limitsHistoryCommand() *cobra.Command {
	var (
		asJSON bool
		limit  int
		before int64
		queue  string
	)
	cmd := &cobra.Command{
		Use:   "history [KIND | --queue QUEUE]",
		Short: "Show who changed a limit or a queue's concurrency, when, why, from what to what; newest first",
		Example: `  twice limits history
  twice limits history email.send.v1 --json
  twice limits history --queue bulk`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usagef("%s takes at most one KIND, got %d arguments", cmd.CommandPath(), len(args))
			}
			return nil
		},
		RunE: run(func(cmd *cobra.Command, args []string) error {
			if limit < 1 || limit > twice.JobListLimitMax {
				return usagef("--limit %d: use a number from 1 to %d", limit, twice.JobListLimitMax)
			}
			if before < 0 {
				return usagef("--before %d: use a change id", before)
			}
			p := &twice.LimitHistoryParams{Queue: queue, BeforeID: before, Limit: limit}
			if len(args) == 1 {
				p.Kind = args[0]
			}
			client, done, err := c.openClient(cmd)
			if err != nil {
				return err
			}
			defer done()
			res, err := client.LimitHistory(cmd.Context(), p)
			if err != nil {
				return err
			}
			if asJSON {
				out := make([]limitChangeJSON, len(res.Changes))
				for i, ch := range res.Changes {
					out[i] = limitChangeJSON{ID: ch.ID, Scope: string(ch.Scope), Name: ch.Name,
						Previous: newLimitSettingJSON(ch.Scope, ch.Previous), New: newLimitSettingJSON(ch.Scope, ch.New),
						By: ch.By, Reason: ch.Reason, At: ch.At}
				}
				return writeJSON(c.stdout, out)
			}
			if len(res.Changes) == 0 {
				fmt.Fprintln(c.stdout, "no limit changes recorded")
				return nil
			}
			tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tAT\tSCOPE\tNAME\tCHANGE\tBY\tREASON")
			for _, ch := range res.Changes {
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s → %s\t%s\t%s\n", ch.ID, formatTime(ch.At), ch.Scope, terminalText(ch.Name),
					settingText(ch.Scope, ch.Previous), settingText(ch.Scope, ch.New), terminalText(ch.By), truncate(fmt.Sprintf("%q", ch.Reason), 60))
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
	f := cmd.Flags()
	f.BoolVar(&asJSON, "json", false, "print JSON")
	f.StringVar(&queue, "queue", "", "show the changes of this queue's concurrency")
	f.IntVar(&limit, "limit", 50, "show at most this many changes")
	f.Int64Var(&before, "before", 0, "show only changes with a smaller id (the next page)")
	return cmd
}

// settingText is one side of a change: the setting in words, or
// "compiled" for none.
func settingText(scope twicetype.LimitScope, s *twicetype.LimitSetting) string {
	if s == nil {
		return "compiled"
	}
	return s.Text(scope)
}
