package driverkit

import (
	"database/sql"
	"time"
)

// Times is how a driver's time columns scan: T is what a NOT NULL time
// column scans into, N what a nullable one does; At and Null turn them into
// a UTC time, NULL into the zero time. The shared row readers below take a
// Times, so one reader serves a driver that stores times as times
// (NativeTimes) and one that stores unix microseconds (MicrosTimes).
type Times[T, N any] struct {
	At   func(T) time.Time
	Null func(N) time.Time
}

// NativeTimes reads time columns the database driver returns as
// time.Time: PostgreSQL's timestamptz, MySQL's DATETIME(6) (parseTime=true).
var NativeTimes = Times[time.Time, sql.NullTime]{At: time.Time.UTC, Null: FromNullTime}

// MicrosTimes reads time columns stored as unix microseconds (SQLite).
var MicrosTimes = Times[int64, sql.NullInt64]{At: FromMicros, Null: FromNullMicros}

// FromNullTime reads an optional stored time back in UTC; NULL is the zero
// time.
func FromNullTime(v sql.NullTime) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return v.Time.UTC()
}

// FromMicros reads a time stored as unix microseconds back in UTC.
func FromMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }

// FromNullMicros reads an optional time stored as unix microseconds back
// in UTC; NULL is the zero time.
func FromNullMicros(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return FromMicros(v.Int64)
}
