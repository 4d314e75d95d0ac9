package cli

import (
	"context"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicetype"
)

// Why a job is not running, as the CLI shows it: the WHY column of 'jobs
// ls', the "waits because" line of 'jobs show', "waiting_because" in
// both --json, and the reasons of a workflow's tasks. The reasons are
// twice.Client.JobWaitReasons', read once per listing.

// whyRunes bounds the reason a listing shows per job; 'jobs show' shows it
// whole.
const whyRunes = 60

// loadWhy reads why each of jobs that neither runs nor has finished waits,
// for the book's renderings of them.
func (k *kindBook) loadWhy(ctx context.Context, client *twice.Client, jobs []*twicetype.JobRow) error {
	reasons, err := client.JobWaitReasons(ctx, jobs)
	if err != nil {
		return err
	}
	k.why = make(map[int64]*twice.WaitReason, len(jobs))
	for i, j := range jobs {
		if reasons[i] != nil {
			k.why[j.ID] = reasons[i]
		}
	}
	return nil
}

// whyCell is the WHY of j in a listing: its reason cut to one short line,
// "-" for a job that runs or has finished.
func (k *kindBook) whyCell(j *twicetype.JobRow) string {
	r := k.why[j.ID]
	if r == nil {
		return "-"
	}
	return terminalText(truncate(r.Text, whyRunes))
}
