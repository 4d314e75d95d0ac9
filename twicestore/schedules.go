package twicestore

import (
	"errors"
	"fmt"
	"time"

	"github.com/twicejobs/twice/twicetype"
)

// ScheduleTickParams describe one tick.
type ScheduleTickParams struct {
	Name    string
	Kind    string
	Spec    string
	TickAt  time.Time
	NextAt  time.Time
	Outcome string           // twicetype.ScheduleEnqueued or ScheduleSkipped
	Job     *JobInsertParams // the job to enqueue; nil for a skipped tick
	Now     time.Time        // UpdatedAt; zero means the current time
}

// Validate refuses the ticks a store cannot record faithfully; drivers call
// it first in ScheduleTick.
func (p *ScheduleTickParams) Validate() error {
	var err error
	switch {
	case p.Name == "":
		err = errors.New("the schedule has no name")
	case p.TickAt.IsZero():
		err = errors.New("TickAt is zero: give the tick's time from the spec")
	case p.Outcome == twicetype.ScheduleSkipped && p.Job != nil:
		err = errors.New("a skipped tick has a job: leave Job nil, or record the tick as enqueued")
	case p.Outcome != twicetype.ScheduleEnqueued && p.Outcome != twicetype.ScheduleSkipped:
		err = fmt.Errorf("outcome %q is not %q or %q", p.Outcome, twicetype.ScheduleEnqueued, twicetype.ScheduleSkipped)
	default:
		return nil
	}
	return fmt.Errorf("tick schedule %q: %w", p.Name, err)
}

// ScheduleTickResult tells whether this call recorded the tick.
type ScheduleTickResult struct {
	Fired bool
	// Job is the enqueued job when Fired and Job was given.
	Job *twicetype.JobRow
}

// ScheduleListParams are empty; they keep the method's shape.
type ScheduleListParams struct{}

// ScheduleListResult holds the schedules, ordered by name.
type ScheduleListResult struct {
	Schedules []twicetype.Schedule
}

// ScheduleTicksKept is how many of a schedule's newest ticks a store
// keeps for ScheduleTicks; ScheduleTick deletes older ones.
const ScheduleTicksKept = 20

// ScheduleTicksParams name a schedule.
type ScheduleTicksParams struct {
	Name string
	// Limit bounds the ticks listed; zero lists all that are kept.
	Limit int
}

// ScheduleTicksResult holds the ticks, newest first.
type ScheduleTicksResult struct {
	Ticks []twicetype.ScheduleTick
}

// ScheduleRemoveParams name the schedule to remove.
type ScheduleRemoveParams struct {
	Name string
}
