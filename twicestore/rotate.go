package twicestore

import "context"

// Rotator is a store whose waiting and running jobs sit in generations
// that can be emptied whole (twicepg: the partitions twice_jobs_live_0
// and _1). Emptying a generation removes the dead row versions its jobs'
// state changes left, whatever snapshot another session holds, which
// vacuum cannot. A worker calls JobRotate every few seconds; any node may,
// and two nodes at once do no harm.
type Rotator interface {
	// JobRotate empties the generation that new jobs are not entering
	// now, when its dead row versions are worth it (or p.Force): it moves
	// the jobs left in it to the current generation, then truncates it.
	// A generation some transaction still uses is left for a later call,
	// with no error.
	JobRotate(ctx context.Context, p *JobRotateParams) (*JobRotateResult, error)
}

// JobRotateParams says when a generation is emptied.
type JobRotateParams struct {
	// MinDead is the fewest dead row versions, as the server's statistics
	// count them, that make a generation worth emptying; it must also
	// hold four times as many dead versions as live jobs, so a large
	// backlog is not moved for a few dead rows. Zero is 10,000.
	MinDead int64
	// Force empties the generation whatever the statistics say.
	Force bool
}

// JobRotateResult says what JobRotate did.
type JobRotateResult struct {
	// Generation is the generation considered: the one new jobs are not
	// entering.
	Generation int
	// Dead and Live are its dead row versions and live jobs, as the
	// statistics counted them before the call.
	Dead, Live int64
	// Moved is how many jobs moved to the current generation.
	Moved int64
	// Emptied says whether the generation was truncated.
	Emptied bool
	// Analyzed says whether the statistics of the generation new jobs
	// enter were refreshed, which they are when they count far fewer
	// jobs than it holds (just after a truncation).
	Analyzed bool
}
