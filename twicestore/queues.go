package twicestore

import (
	"errors"
	"fmt"
	"time"

	"github.com/twicejobs/twice/twicetype"
)

// JobQueueStatsParams give the time jobs are due by.
type JobQueueStatsParams struct {
	Now time.Time
}

// QueueStat describes one queue's waiting jobs.
type QueueStat struct {
	Queue string
	// Due counts available jobs whose RunAt is at or before Now.
	Due int
	// Scheduled counts available jobs due later (delays, retry backoffs,
	// snoozes).
	Scheduled int
	// OldestDue is the earliest RunAt of the due jobs; zero when none is
	// due.
	OldestDue time.Time
	// Paused reports the queue paused at Now (QueuePause): its due jobs
	// wait on purpose, so their age is no sign of trouble.
	Paused bool
}

// JobQueueStatsResult holds one stat per queue with available jobs, by
// queue name.
type JobQueueStatsResult struct {
	Queues []QueueStat
}

// QueuePauseParams name the queue to pause and say who asks, why, and
// until when.
type QueuePauseParams struct {
	Queue string
	// Until ends the pause by itself; zero pauses until QueueResume.
	Until  time.Time
	By     string
	Reason string
	// Now is when the pause starts; zero is the current time.
	Now time.Time
}

// Validate refuses a pause with no queue or one that would end before it
// starts; drivers call it first.
func (p *QueuePauseParams) Validate() error {
	now := p.Now
	if now.IsZero() {
		now = time.Now()
	}
	switch {
	case p.Queue == "":
		return errors.New("pause queue: no queue named")
	case !p.Until.IsZero() && !p.Until.After(now):
		return fmt.Errorf("pause queue %q: until %s is not in the future: give a later time, or none to pause until resumed",
			p.Queue, p.Until.UTC().Format(time.RFC3339))
	}
	return nil
}

// QueueResumeParams name the queue to resume.
type QueueResumeParams struct {
	Queue string
	// Now tells a pause in force from one whose Until has passed; zero is
	// the current time.
	Now time.Time
}

// QueueResumeResult tells whether a pause was lifted.
type QueueResumeResult struct {
	// Resumed is false when the queue was not paused (or its pause had
	// run out).
	Resumed bool
}

// QueueListParams give the time jobs are due by and pauses are judged at.
type QueueListParams struct {
	Now time.Time // zero is the current time
}

// QueueListResult holds the queues, ordered by name's bytes.
type QueueListResult struct {
	Queues []twicetype.QueueInfo
}

// QueueStrandedParams define which nodes count as alive.
type QueueStrandedParams struct {
	AliveSince time.Time
}

// QueueStrandedResult lists the stranded queues, by name.
type QueueStrandedResult struct {
	Queues []twicetype.StrandedQueue
}
