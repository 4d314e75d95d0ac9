package driverkit

import (
	"github.com/twicejobs/twice/internal/dbrows"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// ChildrenEarned reports whether JobFinish inserts outcome o's Children:
// only for a completed outcome, when its guarded write applied or, for an
// outcome with a Marker, when this call's claim of the marker is the one
// stored (claimedHere), as Composer describes.
func ChildrenEarned(o *twicestore.JobOutcome, applied, claimedHere bool) bool {
	if len(o.Children) == 0 || o.State != twicetype.JobStateCompleted {
		return false
	}
	if o.Marker != nil {
		return claimedHere
	}
	return applied
}

// Joined counts the jobs of an insert that joined a batch: all but the
// duplicates left out.
func Joined(rs []*twicestore.JobInsertResult) int {
	n := 0
	for _, r := range rs {
		if !r.Duplicate {
			n++
		}
	}
	return n
}

// ReadTasks adds each row of (name, kind, pending, state) to res as a
// task, and closes rows.
func ReadTasks(res *twicestore.WorkflowGetResult, rows dbrows.Rows) error {
	return dbrows.Each(rows, func(s dbrows.Scanner) error {
		var (
			t     twicetype.WorkflowTask
			state string
		)
		if err := s.Scan(&t.Name, &t.Kind, &t.Pending, &state); err != nil {
			return err
		}
		t.State = twicetype.WorkflowTaskState(state)
		res.AddTask(&t)
		return nil
	})
}

// ReadDeps adds each row of (dep, task) to res as an edge, and closes
// rows.
func ReadDeps(res *twicestore.WorkflowGetResult, rows dbrows.Rows) error {
	return dbrows.Each(rows, func(s dbrows.Scanner) error {
		var dep, task string
		if err := s.Scan(&dep, &task); err != nil {
			return err
		}
		res.AddDep(dep, task)
		return nil
	})
}
