package driverkit

import (
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/twicejobs/twice/twicestore"
)

// FilterDialect is what a driver with ? parameters (SQLite, MySQL) says of
// its SQL for FilterSQL: how it tests a list of ids, binds a time, and
// tests one metadata pair. Each returns a condition and its arguments.
type FilterDialect struct {
	IDs      func(ids []int64) (string, []any)
	Time     func(t time.Time) any
	Metadata func(key, value string) (string, []any)
}

// FilterSQL renders f as conditions on the jobs table joined by AND
// (always at least one), with their arguments, in d's dialect. The filter
// must have passed Validate. Metadata pairs are tested in the keys' order,
// so a filter renders the same statement every time.
func FilterSQL(f twicestore.JobFilter, d FilterDialect) (string, []any) {
	conds := []string{"1 = 1"}
	var args []any
	add := func(cond string, a ...any) {
		conds = append(conds, cond)
		args = append(args, a...)
	}
	if len(f.IDs) > 0 {
		cond, a := d.IDs(f.IDs)
		add(cond, a...)
	}
	if f.State != "" {
		add("state = ?", string(f.State))
	}
	if f.Kind != "" {
		add("kind = ?", f.Kind)
	}
	if f.Queue != "" {
		add("queue = ?", f.Queue)
	}
	if f.Node != "" {
		add("attempted_by = ?", f.Node)
	}
	switch f.Timing {
	case twicestore.JobDue:
		add("state = 'available' AND run_at <= ?", d.Time(nowOr(f.Now)))
	case twicestore.JobScheduled:
		add("state = 'available' AND run_at > ?", d.Time(nowOr(f.Now)))
	}
	if f.CorrelationID != "" {
		add("correlation_id = ?", f.CorrelationID) // the drivers index (correlation_id, id)
	}
	for _, k := range slices.Sorted(maps.Keys(f.Metadata)) {
		cond, a := d.Metadata(k, f.Metadata[k])
		add(cond, a...)
	}
	return strings.Join(conds, " AND "), args
}

// nowOr returns t, or the current time when t is zero.
func nowOr(t time.Time) time.Time {
	if t.IsZero() {
		return time.Now()
	}
	return t
}
