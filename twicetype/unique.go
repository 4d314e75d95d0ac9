package twicetype

import (
	"fmt"
	"strings"
)

// UniqueStates is the set of states in which a job holds its unique key,
// as a bitmask with one fixed bit per JobState. It is stored with each job
// (the unique_states column), and the partial unique index on (kind,
// unique key) covers a row exactly while the bit of its current state is
// set, so the database itself settles races between inserters, whatever
// states hold the key.
//
// The bits are part of the stored format and never change; both drivers'
// migrations and queries spell them out as
//
//	CASE state WHEN 'available' THEN 1 WHEN 'running' THEN 2 WHEN 'completed' THEN 4
//	    WHEN 'dead' THEN 8 WHEN 'discarded' THEN 16 WHEN 'cancelled' THEN 32 ELSE 0 END
//
// which is UniqueBit for each state. A state added later takes the next
// free bit, unless it is a kind of one that has a bit: a waiting job (one
// its handler parked) has started and not finished, so it holds its key
// as a running one does, under the running bit, and the drivers spell
// the mapping with WHEN 'waiting' THEN 2.
type UniqueStates uint8

// The bit of each state (see UniqueStates).
const (
	UniqueAvailable UniqueStates = 1 << iota
	UniqueRunning
	UniqueCompleted
	UniqueDead
	UniqueDiscarded
	UniqueCancelled
)

// UniqueStatesDefault holds a key while the job is unfinished (available or
// running): what a zero UniqueStates means, and what every job stored
// before the states were configurable holds.
const UniqueStatesDefault = UniqueAvailable | UniqueRunning

// uniqueAll are the bits of every known state.
const uniqueAll = UniqueAvailable | UniqueRunning | UniqueCompleted | UniqueDead | UniqueDiscarded | UniqueCancelled

// UniqueBit is the state's bit in a UniqueStates, 0 for an unknown state.
func (s JobState) UniqueBit() UniqueStates {
	switch s {
	case JobStateAvailable:
		return UniqueAvailable
	case JobStateRunning, JobStateWaiting:
		return UniqueRunning
	case JobStateCompleted:
		return UniqueCompleted
	case JobStateDead:
		return UniqueDead
	case JobStateDiscarded:
		return UniqueDiscarded
	case JobStateCancelled:
		return UniqueCancelled
	}
	return 0
}

// UniqueStatesOf is the set of the given states; an unknown state adds no
// bit (check states with JobState.Valid first).
func UniqueStatesOf(states ...JobState) UniqueStates {
	var u UniqueStates
	for _, s := range states {
		u |= s.UniqueBit()
	}
	return u
}

// OrDefault is u, or UniqueStatesDefault when u is zero (not set).
func (u UniqueStates) OrDefault() UniqueStates {
	if u == 0 {
		return UniqueStatesDefault
	}
	return u
}

// Has reports whether a job in state s holds its key.
func (u UniqueStates) Has(s JobState) bool {
	b := s.UniqueBit()
	return b != 0 && u&b == b
}

// States lists the states in u in life-cycle order, each bit once: the
// waiting state, which shares the running bit, is not listed.
func (u UniqueStates) States() []JobState {
	var out []JobState
	for _, s := range AllJobStates {
		if u.Has(s) && s != JobStateWaiting {
			out = append(out, s)
		}
	}
	return out
}

// String lists the states joined by "|", such as "available|running".
func (u UniqueStates) String() string {
	names := make([]string, 0, len(AllJobStates))
	for _, s := range u.States() {
		names = append(names, string(s))
	}
	if rest := u &^ uniqueAll; rest != 0 {
		names = append(names, fmt.Sprintf("0x%x", uint8(rest)))
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, "|")
}

// Validate returns an error unless u (after OrDefault) holds the key in
// available and running, holds it while dead if it does once discarded,
// and has no bit of an unknown state.
//
// The rule is that no change of state but a retry by hand may move a job
// into holding its key: a job that did not hold its key while waiting or
// running (or while dead) could find it taken by another job when it
// finished (or was discarded), and that change would fail on the unique
// index. A retry checks for a holder first.
func (u UniqueStates) Validate() error {
	u = u.OrDefault()
	switch {
	case u&^uniqueAll != 0:
		return fmt.Errorf("unique states %s: bits 0x%x are no state's", u, uint8(u&^uniqueAll))
	case u&UniqueStatesDefault != UniqueStatesDefault:
		return fmt.Errorf("unique states %s: a key must be held while available and running; add both", u)
	case u&UniqueDiscarded != 0 && u&UniqueDead == 0:
		return fmt.Errorf("unique states %s: a discarded job was dead first, so a key held once discarded must be held while dead; add dead", u)
	}
	return nil
}
