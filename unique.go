package twice

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"time"

	"github.com/twicejobs/twice/twicetype"
)

// UniqueOpts make an enqueue a no-op (or, with OnConflictReplace, an
// update) while a job of the same kind that matches it by the chosen parts
// — its args (all or some fields), its queue, the period of its run time —
// holds the key: while unfinished, or also in a finished state of ByStates.
// The key is a hash of those parts, stored with the job and its states, so
// the database's unique index settles races between nodes: of concurrent
// inserters one inserts, the others get that job back with Duplicate set.
// With no By field set the kind itself is the key. A replaced job keeps
// its queue, priority, unique key, states and concurrency key: only its
// args and run time change.
type UniqueOpts struct {
	// ByArgs makes the args part of the key: all of them, or only the
	// fields ArgsFields names.
	ByArgs bool
	// ArgsFields narrows ByArgs to these args fields, by JSON name, and
	// implies it. A name the args type does not have is refused at
	// registration or enqueue (a raw-JSON enqueue of a kind this client
	// does not register cannot be checked: a missing field is null).
	ArgsFields []string
	// ByPeriod makes the period a job's run time falls in part of the key:
	// periods of this length from the Unix epoch (UTC), at least a second;
	// 0 is none. The run time is taken when the key is made (RunAt, or now
	// plus Delay): a Replace that moves it leaves the key as it was.
	ByPeriod time.Duration
	// ByQueue makes the job's queue part of the key, so the same args may
	// wait once per queue.
	ByQueue bool
	// ByStates are the states in which a job holds its key. They must
	// include available and running: a job that let its key go while
	// unfinished could find it taken when it finished. Any finished state
	// may be added: completed ("never again", or once per ByPeriod even
	// after it ran), dead ("not while one waits in the dead-letter queue"),
	// cancelled, and discarded (with dead). A finished job holds its key
	// until retention or a person deletes it (keep CompletedRetention at
	// least ByPeriod, or KeepForever for "never again"); retrying one by
	// hand while another job holds its key is refused with
	// ErrUniqueConflict. Defaults to available and running.
	ByStates []twicetype.JobState
	// OnConflict says what an enqueue does when the key is held. Defaults
	// to OnConflictSkip.
	OnConflict OnConflict
}

// OnConflict is what an enqueue does when a job already holds its unique
// key.
type OnConflict int

const (
	// OnConflictSkip stores nothing: the result is the holder, with
	// Duplicate set.
	OnConflictSkip OnConflict = iota
	// OnConflictReplace moves the new args and run time onto the holder
	// while it waits (state available) — a debounce: the result is the
	// updated holder, with Duplicate and Replaced set. A running holder, or
	// a finished one holding its key in one of its ByStates, is never
	// touched: the enqueue is then a plain duplicate. The update is
	// guarded by the holder's state in the store, so a job a worker
	// leases at the same moment is either replaced before the lease or not
	// at all.
	OnConflictReplace
)

// minUniquePeriod is the shortest ByPeriod: shorter periods would make a
// key per enqueue, and a clock skew between nodes matters more than the
// period.
const minUniquePeriod = time.Second

// check refuses options no store can honour, naming what to do. fields
// are the args type's JSON fields, nil when unknown (a type that encodes
// itself, or a raw-JSON enqueue of a kind this client does not register).
func (u *UniqueOpts) check(t reflect.Type, fields []ArgField) error {
	switch {
	case u.ByPeriod < 0:
		return fmt.Errorf("UniqueOpts.ByPeriod is %s: use 0 for no period or at least %s", u.ByPeriod, minUniquePeriod)
	case u.ByPeriod > 0 && u.ByPeriod < minUniquePeriod:
		return fmt.Errorf("UniqueOpts.ByPeriod is %s: use at least %s", u.ByPeriod, minUniquePeriod)
	case u.OnConflict != OnConflictSkip && u.OnConflict != OnConflictReplace:
		return fmt.Errorf("UniqueOpts.OnConflict is %d: use OnConflictSkip or OnConflictReplace", u.OnConflict)
	}
	for _, s := range u.ByStates {
		if !s.Valid() {
			return fmt.Errorf("UniqueOpts.ByStates has %q, which is no job state: use the twicetype.JobState constants", s)
		}
	}
	if len(u.ByStates) > 0 {
		set := twicetype.UniqueStatesOf(u.ByStates...)
		for _, s := range []twicetype.JobState{twicetype.JobStateAvailable, twicetype.JobStateRunning} {
			if !set.Has(s) {
				return fmt.Errorf("UniqueOpts.ByStates lacks %q: a key is held while the job is unfinished; "+
					"list available and running, then the finished states to add, or leave ByStates empty", s)
			}
		}
		if set.Has(twicetype.JobStateDiscarded) && !set.Has(twicetype.JobStateDead) {
			return fmt.Errorf("UniqueOpts.ByStates has %q but not %q: a discarded job was dead first; add dead",
				twicetype.JobStateDiscarded, twicetype.JobStateDead)
		}
	}
	if len(u.ArgsFields) == 0 || t == nil {
		return nil
	}
	if fields == nil {
		return fmt.Errorf("UniqueOpts.ArgsFields names %v, but %s encodes itself, so its fields are unknown: use ByArgs alone", u.ArgsFields, t)
	}
	names := make([]string, len(fields))
	for i, f := range fields {
		names[i] = f.Name
	}
	for _, n := range u.ArgsFields {
		if !slices.Contains(names, n) {
			return fmt.Errorf("UniqueOpts.ArgsFields names field %q, which %s does not have (its JSON fields: %v): name one of them", n, t, names)
		}
	}
	return nil
}

// states is the set of states in which a job holds its key; zero (the
// store's default, available and running) for no ByStates.
func (u *UniqueOpts) states() twicetype.UniqueStates {
	return twicetype.UniqueStatesOf(u.ByStates...)
}

// uniqueOf resolves the uniqueness of a job of the kind registered as e
// (nil for none): the call's options,
// then the kind's; nil when neither asks for one.
func uniqueOf(e *kindEntry, call *UniqueOpts) (*UniqueOpts, error) {
	if call != nil {
		var t reflect.Type
		var fields []ArgField
		if e != nil {
			t, fields = e.argsType, ArgFields(e.argsType)
		}
		if err := call.check(t, fields); err != nil {
			return nil, err
		}
		return call, nil
	}
	if e != nil {
		return e.opts.Unique, nil
	}
	return nil, nil
}

// uniqueKey is the key u derives for a job: a hash of the kind and the
// chosen parts, so a key never exceeds MaxKeyBytes whatever the args.
func uniqueKey(u *UniqueOpts, kind, queue string, args []byte, runAt time.Time) (string, error) {
	h := sha256.New()
	part := func(name string, v []byte) {
		// Length-prefixed parts: no two choices of parts hash alike.
		fmt.Fprintf(h, "%s:%d:", name, len(v))
		h.Write(v)
	}
	part("kind", []byte(kind))
	if u.ByQueue {
		part("queue", []byte(queue))
	}
	if u.ByPeriod > 0 {
		start := runAt.UTC().Truncate(u.ByPeriod)
		part("period", []byte(strconv.FormatInt(start.UnixNano(), 10)+"/"+u.ByPeriod.String()))
	}
	if u.ByArgs || len(u.ArgsFields) > 0 {
		canon, err := canonicalArgs(args, u.ArgsFields)
		if err != nil {
			return "", err
		}
		part("args", canon)
	}
	return "u1:" + hex.EncodeToString(h.Sum(nil)), nil
}

// canonicalArgs is the args object (only fields, when given) in one
// spelling: keys sorted, no insignificant space, so the same args make the
// same key whichever client encoded them. A named field the args lack is
// null.
func canonicalArgs(raw []byte, fields []string) ([]byte, error) {
	var obj map[string]any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber() // numbers as written: no float rounding of big ids
	if err := d.Decode(&obj); err != nil {
		return nil, fmt.Errorf("unique key: args are not a JSON object: %w", err)
	}
	if len(fields) > 0 {
		picked := make(map[string]any, len(fields))
		for _, f := range fields {
			picked[f] = obj[f]
		}
		obj = picked
	}
	return json.Marshal(obj) // maps encode with sorted keys
}
