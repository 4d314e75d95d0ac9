package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/twicejobs/twice"
)

// kindsCheckCommand is 'kinds check': Client.CheckArgs for CI, so a
// deploy that would strand the waiting jobs fails its pipeline before it
// fails its workers' start.
func (c *cli) kindsCheckCommand() *cobra.Command {
	var (
		asJSON  bool
		against string
	)
	cmd := &cobra.Command{
		Use:   "check [KIND...]",
		Short: "Check this binary's args of each kind against the catalog and the jobs that wait (exit 1 on an incompatible change)",
		Long: "Check the args of this binary's kinds (all of them, or those named) as a worker's start does:\n" +
			"against the stored jobs that will still run (available, scheduled, retrying, parked, running;\n" +
			"the newest 100,000 of each kind) and against what live workers of the kind publish in the\n" +
			"catalog. A field those have and this binary lacks (removed or renamed), or of another JSON\n" +
			"type, is incompatible: exit 1, naming the kind, the field and the jobs that carry it, unless\n" +
			"the kind is registered with KindOpts.ArgsChangeAllowed. Added fields and sensitive flags are\n" +
			"compatible: exit 0 with a summary.\n\n" +
			"With --against BINARY, no database is read: the args are checked against what BINARY (the\n" +
			"worker build deployed now, another twice worker binary) registers, as 'BINARY kinds schema'\n" +
			"prints it; a field it has and this binary lacks, or of another type, is incompatible, since\n" +
			"its jobs carry it.",
		Example: "  twice kinds check\n  twice kinds check order.paid.v1 --json\n  ./worker-new kinds check --against ./worker-deployed",
		RunE: run(func(cmd *cobra.Command, args []string) error {
			if len(c.reg.Kinds()) == 0 {
				return usagef("this binary registers no kinds, so there are no args to check: run the check from your worker's binary (built with twicecli.Main(registry))")
			}
			var rep *twice.ArgsReport
			if against == "catalog" {
				client, done, err := c.openClient(cmd)
				if err != nil {
					return err
				}
				defer done()
				if rep, err = client.CheckArgs(cmd.Context(), args...); err != nil {
					return err
				}
			} else {
				prev, err := readArgsSchema(cmd.Context(), against)
				if err != nil {
					return err
				}
				if rep, err = c.reg.CheckArgsAgainst(prev, args...); err != nil {
					return err
				}
			}
			if asJSON {
				if err := writeJSON(c.stdout, rep); err != nil {
					return err
				}
			} else {
				c.printArgsReport(rep)
			}
			if err := rep.Err(); err != nil {
				return &failure{err: err}
			}
			return nil
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().StringVar(&against, "against", "catalog", "what to check against: catalog (the database's kind catalog and waiting jobs), or the path of the twice worker binary deployed now")
	return cmd
}

// printArgsReport prints one line per kind, then a summary line.
func (c *cli) printArgsReport(rep *twice.ArgsReport) {
	counts := map[twice.ArgsVerdict]int{}
	for _, k := range rep.Kinds {
		counts[k.Verdict]++
		line := fmt.Sprintf("%s: %s", terminalText(k.Kind), k.Verdict)
		if k.JobsScanned > 0 {
			line += fmt.Sprintf(" (%d %s read", k.JobsScanned, plural(k.JobsScanned, "job", "jobs"))
			if k.ScanCapped {
				line += fmt.Sprintf(", the newest %d only", twice.ArgsScanLimit)
			}
			line += ")"
		}
		if s := k.Summary(); s != "" {
			line += ": " + terminalText(s)
		}
		if k.Verdict == twice.ArgsAllowed {
			line += " — allowed: " + terminalText(k.AllowedReason)
		}
		fmt.Fprintln(c.stdout, line)
	}
	var parts []string
	for _, v := range []twice.ArgsVerdict{twice.ArgsIncompatible, twice.ArgsAllowed, twice.ArgsCompatible, twice.ArgsUnchanged, twice.ArgsNew, twice.ArgsUnchecked} {
		if counts[v] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[v], v))
		}
	}
	fmt.Fprintf(c.stdout, "%d %s checked: %s\n", len(rep.Kinds), plural(len(rep.Kinds), "kind", "kinds"), strings.Join(parts, ", "))
}
