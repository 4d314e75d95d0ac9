package driverkit

import (
	"github.com/twicejobs/twice/internal/dbrows"
	"github.com/twicejobs/twice/twicetype"
)

// ScheduleTickRow returns the reader of one row of schedule name's ticks,
// its columns selected as tick_at, outcome, job_id, recorded_at; its times
// read as tm says.
func ScheduleTickRow[T, N any](tm Times[T, N], name string) func(dbrows.Scanner) (twicetype.ScheduleTick, error) {
	return func(r dbrows.Scanner) (twicetype.ScheduleTick, error) {
		var (
			t            = twicetype.ScheduleTick{Name: name}
			at, recorded T
		)
		if err := r.Scan(&at, &t.Outcome, &t.JobID, &recorded); err != nil {
			return t, err
		}
		t.TickAt, t.RecordedAt = tm.At(at), tm.At(recorded)
		return t, nil
	}
}

// ScheduleRow returns the reader of one row of twice_schedules, its
// columns selected as name, kind, spec, last_tick_at, last_outcome,
// last_job_id, next_at, updated_at; its times read as tm says.
func ScheduleRow[T, N any](tm Times[T, N]) func(dbrows.Scanner) (twicetype.Schedule, error) {
	return func(r dbrows.Scanner) (twicetype.Schedule, error) {
		var (
			s                   twicetype.Schedule
			lastTick, updatedAt T
			next                N
		)
		if err := r.Scan(&s.Name, &s.Kind, &s.Spec, &lastTick, &s.LastOutcome, &s.LastJobID,
			&next, &updatedAt); err != nil {
			return s, err
		}
		s.LastTickAt, s.NextAt, s.UpdatedAt = tm.At(lastTick), tm.Null(next), tm.At(updatedAt)
		return s, nil
	}
}
