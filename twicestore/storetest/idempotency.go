package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// On SQLite a transaction holds the database's only write lock, so the
// transaction check uses the store only once the transaction is over.
var idempotencyTests = []test{
	{"BeginTakesNewKey", testIdemNew},
	{"BeginWhileRunning", testIdemRunning},
	{"BeginAfterCompleteReplays", testIdemReplay},
	{"PrincipalsIndependent", testIdemPrincipals},
	{"StaleTakeOver", testIdemStale},
	{"StaleNeverTakenByAnotherRequest", testIdemStaleOtherRequest},
	{"ExtendKeepsTheLock", testIdemExtend},
	{"ExtendNeedsTheCurrentLock", testIdemExtendFenced},
	{"StaleHolderCannotTouchTheNewRecord", testIdemFenced},
	{"DoneNeverTakenOver", testIdemDoneStale},
	{"ExpiredIsAbsent", testIdemExpired},
	{"Release", testIdemRelease},
	{"CompleteMissing", testIdemCompleteMissing},
	{"ConcurrentBeginTakesOnce", testIdemConcurrent},
	{"ConcurrentTakeOverTakesOnce", testIdemConcurrentTakeOver},
	{"Prune", testIdemPrune},
	{"RolledBackBeginLeavesNothing", testIdemTx},
}

// idemStale is the StaleAfter of the suite's Begins.
const idemStale = time.Minute

// idemBegin returns the parameters of a Begin of (principal, key) at now,
// expiring a day later.
func idemBegin(principal, key, fingerprint string, now time.Time) *twicestore.IdempotencyBeginParams {
	return &twicestore.IdempotencyBeginParams{
		Principal: principal, Key: key, Fingerprint: fingerprint,
		Now: now, ExpiresAt: now.Add(24 * time.Hour), StaleAfter: idemStale,
	}
}

func (e *env) idemBeginWith(ex twicestore.Executor, p *twicestore.IdempotencyBeginParams) *twicestore.IdempotencyBeginResult {
	e.t.Helper()
	res, err := ex.IdempotencyBegin(e.ctx, p)
	if err != nil {
		e.t.Fatalf("IdempotencyBegin(%q, %q): %v", p.Principal, p.Key, err)
	}
	return res
}

func (e *env) idemBegin(p *twicestore.IdempotencyBeginParams) *twicestore.IdempotencyBeginResult {
	e.t.Helper()
	return e.idemBeginWith(e.s, p)
}

func (e *env) idemComplete(p *twicestore.IdempotencyCompleteParams) {
	e.t.Helper()
	if err := e.s.IdempotencyComplete(e.ctx, p); err != nil {
		e.t.Fatalf("IdempotencyComplete(%q, %q): %v", p.Principal, p.Key, err)
	}
}

func (e *env) idemRelease(principal, key string) {
	e.t.Helper()
	if err := e.s.IdempotencyRelease(e.ctx, &twicestore.IdempotencyKeyParams{Principal: principal, Key: key}); err != nil {
		e.t.Fatalf("IdempotencyRelease(%q, %q): %v", principal, key, err)
	}
}

// takenRecord is the record a Begin that took a fresh key must return.
func takenRecord(p *twicestore.IdempotencyBeginParams) twicetype.IdempotencyRecord {
	return twicetype.IdempotencyRecord{
		Principal: p.Principal, Key: p.Key, Fingerprint: p.Fingerprint,
		LockedAt: p.Now, CreatedAt: p.Now, ExpiresAt: p.ExpiresAt,
	}
}

// checkBegin fails the test unless res is a Begin result with taken and
// the record want: times compared with Equal and required in UTC, a nil
// Header or Body equal to an empty one.
func checkBegin(t *testing.T, what string, res *twicestore.IdempotencyBeginResult, taken bool, want twicetype.IdempotencyRecord) {
	t.Helper()
	got := res.Record
	if res.Taken != taken || got.Principal != want.Principal || got.Key != want.Key ||
		got.Fingerprint != want.Fingerprint || got.Done != want.Done || got.Status != want.Status ||
		!sameHeader(got.Header, want.Header) || !bytes.Equal(got.Body, want.Body) ||
		!got.LockedAt.Equal(want.LockedAt) || !got.CreatedAt.Equal(want.CreatedAt) ||
		!got.ExpiresAt.Equal(want.ExpiresAt) {
		t.Fatalf("%s: IdempotencyBegin = taken=%t %s\nwant taken=%t %s", what, res.Taken, fmtIdem(got), taken, fmtIdem(want))
	}
	for name, at := range map[string]time.Time{"LockedAt": got.LockedAt, "CreatedAt": got.CreatedAt, "ExpiresAt": got.ExpiresAt} {
		if at.Location() != time.UTC {
			t.Errorf("%s: %s is in %s, want UTC", what, name, at.Location())
		}
	}
}

func sameHeader(a, b map[string][]string) bool {
	return maps.EqualFunc(a, b, func(x, y []string) bool { return slices.Equal(x, y) })
}

func fmtIdem(r twicetype.IdempotencyRecord) string {
	return fmt.Sprintf("{principal=%q key=%q fingerprint=%q done=%t status=%d header=%v body=%q locked=%s created=%s expires=%s}",
		r.Principal, r.Key, r.Fingerprint, r.Done, r.Status, r.Header, r.Body, r.LockedAt, r.CreatedAt, r.ExpiresAt)
}

func testIdemNew(t *testing.T, e *env) {
	p := idemBegin("alice", "key-1", "fp-1", e.base)
	checkBegin(t, "first Begin", e.idemBegin(p), true, takenRecord(p))
}

func testIdemRunning(t *testing.T, e *env) {
	first := idemBegin("alice", "key-1", "fp-1", e.base)
	e.idemBegin(first)
	want := takenRecord(first)
	// Within StaleAfter, up to and including its very end; a different
	// fingerprint is the caller's to compare, so it changes nothing.
	for _, d := range []time.Duration{0, time.Second, idemStale} {
		for _, fp := range []string{"fp-1", "fp-other"} {
			p := idemBegin("alice", "key-1", fp, e.at(d))
			checkBegin(t, fmt.Sprintf("Begin %s later with %s", d, fp), e.idemBegin(p), false, want)
		}
	}
}

func testIdemReplay(t *testing.T, e *env) {
	binary := make([]byte, 256)
	for i := range binary {
		binary[i] = byte(i)
	}
	for i, c := range []struct {
		status int
		header map[string][]string
		body   []byte
	}{
		{200, map[string][]string{"Content-Type": {"application/json"}, "Set-Cookie": {"a=1", "b=2"}}, []byte(`{"id":42}`)},
		{201, map[string][]string{"X-Empty": {""}, "X-Unicode": {"héllo — ✓"}}, binary},
		{204, nil, nil},
		{202, map[string][]string{}, []byte{}},
		{500, map[string][]string{"Retry-After": {"1"}}, []byte("\x00\x00trailing zeros\x00")},
	} {
		key := fmt.Sprintf("key-%d", i)
		p := idemBegin("alice", key, "fp", e.base)
		e.idemBegin(p)
		e.idemComplete(&twicestore.IdempotencyCompleteParams{Principal: "alice", Key: key,
			Status: c.status, Header: c.header, Body: c.body})
		want := takenRecord(p)
		want.Done, want.Status, want.Header, want.Body = true, c.status, c.header, c.body
		// A done record is replayed whatever its lock's age.
		for _, d := range []time.Duration{time.Second, 2 * idemStale} {
			checkBegin(t, fmt.Sprintf("case %d: Begin %s after Complete", i, d),
				e.idemBegin(idemBegin("alice", key, "fp-retry", e.at(d))), false, want)
		}
	}
}

func testIdemPrincipals(t *testing.T, e *env) {
	a := idemBegin("alice", "shared", "fp-a", e.base)
	b := idemBegin("bob", "shared", "fp-b", e.at(time.Second))
	checkBegin(t, "alice's Begin", e.idemBegin(a), true, takenRecord(a))
	checkBegin(t, "bob's Begin of the same key", e.idemBegin(b), true, takenRecord(b))
	e.idemComplete(&twicestore.IdempotencyCompleteParams{Principal: "alice", Key: "shared", Status: 200, Body: []byte("alice")})
	want := takenRecord(b)
	checkBegin(t, "bob's record after alice's Complete",
		e.idemBegin(idemBegin("bob", "shared", "fp-b", e.at(2*time.Second))), false, want)
	e.idemRelease("bob", "shared")
	done := takenRecord(a)
	done.Done, done.Status, done.Body = true, 200, []byte("alice")
	checkBegin(t, "alice's record after bob's Release",
		e.idemBegin(idemBegin("alice", "shared", "fp-a", e.at(3*time.Second))), false, done)
}

func testIdemStale(t *testing.T, e *env) {
	first := idemBegin("alice", "key-1", "fp-1", e.base)
	e.idemBegin(first)
	// The first request crashed: its retry after StaleAfter takes the key
	// over. The record keeps its CreatedAt and expires as the new one says.
	p := idemBegin("alice", "key-1", "fp-1", e.at(idemStale+time.Microsecond))
	want := takenRecord(p)
	want.CreatedAt = first.Now
	checkBegin(t, "Begin after StaleAfter", e.idemBegin(p), true, want)
	// The new lock is fresh: the next retry finds it running.
	checkBegin(t, "Begin right after the take-over",
		e.idemBegin(idemBegin("alice", "key-1", "fp-1", p.Now.Add(time.Second))), false, want)
	// The request that took it over completes.
	e.idemComplete(&twicestore.IdempotencyCompleteParams{Principal: "alice", Key: "key-1", Status: 200, Body: []byte("ok")})
	want.Done, want.Status, want.Body = true, 200, []byte("ok")
	checkBegin(t, "Begin after the take-over's Complete",
		e.idemBegin(idemBegin("alice", "key-1", "fp-1", p.Now.Add(time.Hour))), false, want)
}

// testIdemStaleOtherRequest: a stale key is not taken over by a request
// with another fingerprint (its caller gets the record and answers 422);
// the key stays the first request's, whose retry still takes it over.
func testIdemStaleOtherRequest(t *testing.T, e *env) {
	first := idemBegin("alice", "key-1", "fp-1", e.base)
	e.idemBegin(first)
	want := takenRecord(first)
	for _, d := range []time.Duration{idemStale + time.Microsecond, 10 * idemStale} {
		checkBegin(t, fmt.Sprintf("another request %s later", d),
			e.idemBegin(idemBegin("alice", "key-1", "fp-other", e.at(d))), false, want)
	}
	retry := idemBegin("alice", "key-1", "fp-1", e.at(11*idemStale))
	taken := takenRecord(retry)
	taken.CreatedAt = first.Now
	checkBegin(t, "the first request's retry", e.idemBegin(retry), true, taken)
}

// idemExtend extends the lock locked of (principal, key) to now.
func (e *env) idemExtend(principal, key string, locked, now time.Time) (time.Time, error) {
	res, err := e.s.IdempotencyExtend(e.ctx, &twicestore.IdempotencyExtendParams{
		Principal: principal, Key: key, LockedAt: locked, Now: now})
	if err != nil {
		return time.Time{}, err
	}
	if res.LockedAt.Location() != time.UTC {
		e.t.Errorf("IdempotencyExtend: LockedAt in %s, want UTC", res.LockedAt.Location())
	}
	return res.LockedAt, nil
}

// testIdemExtend: a running request that extends its lock keeps its key
// past StaleAfter from when it began; each Extend moves the lock forward,
// even when the clock does not.
func testIdemExtend(t *testing.T, e *env) {
	p := idemBegin("alice", "key-1", "fp-1", e.base)
	lock := e.idemBegin(p).Record.LockedAt
	for i := 1; i <= 3; i++ {
		now := e.at(time.Duration(i) * idemStale / 2)
		got, err := e.idemExtend("alice", "key-1", lock, now)
		if err != nil || !got.Equal(now) {
			t.Fatalf("Extend %d to %s = %s, %v; want the lock at %s", i, now, got, err, now)
		}
		lock = got
	}
	// 2.5 StaleAfter after Begin, one StaleAfter after the last Extend:
	// the key still holds, for a retry of the same request too.
	want := takenRecord(p)
	want.LockedAt = lock
	checkBegin(t, "retry after the Extends", e.idemBegin(idemBegin("alice", "key-1", "fp-1", lock.Add(idemStale))), false, want)
	// A clock that stands still (or steps back) still moves the lock.
	for _, now := range []time.Time{lock, lock.Add(-time.Hour)} {
		got, err := e.idemExtend("alice", "key-1", lock, now)
		if err != nil || !got.Equal(lock.Add(time.Microsecond)) {
			t.Fatalf("Extend of lock %s to %s = %s, %v; want a microsecond later", lock, now, got, err)
		}
		lock = got
	}
	// Complete with the latest lock stores the response.
	e.idemComplete(&twicestore.IdempotencyCompleteParams{Principal: "alice", Key: "key-1", LockedAt: lock, Status: 201, Body: []byte("ok")})
	want.LockedAt, want.Done, want.Status, want.Body = lock, true, 201, []byte("ok")
	checkBegin(t, "Begin after Complete", e.idemBegin(idemBegin("alice", "key-1", "fp-1", lock.Add(time.Second))), false, want)
}

// testIdemExtendFenced: Extend acts only with the current lock of a
// running record: not with a lock an Extend replaced, nor after a
// take-over, Complete or Release, nor on a key never taken.
func testIdemExtendFenced(t *testing.T, e *env) {
	notFound := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, twicestore.ErrNotFound) {
			t.Errorf("%s: Extend = %v, want an error wrapping ErrNotFound", what, err)
		}
	}
	first := e.idemBegin(idemBegin("alice", "k", "fp", e.base)).Record.LockedAt
	second, err := e.idemExtend("alice", "k", first, e.at(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.idemExtend("alice", "k", first, e.at(2*time.Second))
	notFound("the lock before the last Extend", err)
	_, err = e.idemExtend("bob", "k", second, e.at(2*time.Second))
	notFound("another principal", err)
	_, err = e.idemExtend("alice", "never", second, e.at(2*time.Second))
	notFound("a key never taken", err)
	if _, err := e.s.IdempotencyExtend(e.ctx, &twicestore.IdempotencyExtendParams{Principal: "alice", Key: "k"}); err == nil {
		t.Error("Extend without LockedAt succeeded, want an error")
	}

	// Taken over (the holder froze past StaleAfter): its Extend fails.
	over := e.idemBegin(idemBegin("alice", "k", "fp", second.Add(idemStale+time.Second)))
	if !over.Taken {
		t.Fatal("the take-over did not take the key")
	}
	_, err = e.idemExtend("alice", "k", second, over.Record.LockedAt.Add(time.Second))
	notFound("a holder taken over", err)

	// Completed, or released: nothing to extend.
	e.idemComplete(&twicestore.IdempotencyCompleteParams{Principal: "alice", Key: "k", LockedAt: over.Record.LockedAt, Status: 200})
	_, err = e.idemExtend("alice", "k", over.Record.LockedAt, over.Record.LockedAt.Add(time.Second))
	notFound("a completed record", err)
	released := e.idemBegin(idemBegin("alice", "r", "fp", e.base)).Record.LockedAt
	e.idemRelease("alice", "r")
	_, err = e.idemExtend("alice", "r", released, e.at(time.Second))
	notFound("a released record", err)
}

func testIdemDoneStale(t *testing.T, e *env) {
	p := idemBegin("alice", "key-1", "fp-1", e.base)
	e.idemBegin(p)
	e.idemComplete(&twicestore.IdempotencyCompleteParams{Principal: "alice", Key: "key-1", Status: 201})
	want := takenRecord(p)
	want.Done, want.Status = true, 201
	checkBegin(t, "Begin long after Complete",
		e.idemBegin(idemBegin("alice", "key-1", "fp-2", e.at(10*idemStale))), false, want)
}

func testIdemExpired(t *testing.T, e *env) {
	for _, done := range []bool{false, true} {
		key := fmt.Sprintf("key-done-%t", done)
		p := idemBegin("alice", key, "fp-old", e.base)
		p.ExpiresAt = e.at(time.Hour)
		p.StaleAfter = 24 * time.Hour // never stale: only expiry frees the key
		e.idemBegin(p)
		want := takenRecord(p)
		if done {
			e.idemComplete(&twicestore.IdempotencyCompleteParams{Principal: "alice", Key: key,
				Status: 200, Header: map[string][]string{"A": {"b"}}, Body: []byte("old")})
			want.Done, want.Status, want.Header, want.Body = true, 200, map[string][]string{"A": {"b"}}, []byte("old")
		}
		// At ExpiresAt the record still holds.
		at := idemBegin("alice", key, "fp-new", p.ExpiresAt)
		at.StaleAfter = p.StaleAfter
		checkBegin(t, fmt.Sprintf("done=%t: Begin at ExpiresAt", done), e.idemBegin(at), false, want)
		// After it, the key is absent: a fresh record.
		after := idemBegin("alice", key, "fp-new", p.ExpiresAt.Add(time.Microsecond))
		after.StaleAfter = p.StaleAfter
		checkBegin(t, fmt.Sprintf("done=%t: Begin after ExpiresAt", done), e.idemBegin(after), true, takenRecord(after))
	}
}

func testIdemRelease(t *testing.T, e *env) {
	p := idemBegin("alice", "key-1", "fp-1", e.base)
	e.idemBegin(p)
	e.idemRelease("alice", "key-1")
	retry := idemBegin("alice", "key-1", "fp-1", e.at(time.Second))
	checkBegin(t, "Begin after Release", e.idemBegin(retry), true, takenRecord(retry))
	e.idemRelease("alice", "key-1")
	e.idemRelease("alice", "key-1") // releasing twice is not an error
	e.idemRelease("alice", "never") // nor is releasing a key never taken
	e.idemRelease("bob", "key-1")
}

func testIdemCompleteMissing(t *testing.T, e *env) {
	e.idemBegin(idemBegin("alice", "key-1", "fp-1", e.base))
	for _, k := range []twicestore.IdempotencyKeyParams{{Principal: "alice", Key: "never"}, {Principal: "bob", Key: "key-1"}} {
		err := e.s.IdempotencyComplete(e.ctx, &twicestore.IdempotencyCompleteParams{Principal: k.Principal, Key: k.Key, Status: 200})
		if !errors.Is(err, twicestore.ErrNotFound) {
			t.Errorf("IdempotencyComplete(%q, %q) of a missing record = %v, want an error wrapping ErrNotFound", k.Principal, k.Key, err)
		}
	}
	e.idemRelease("alice", "key-1")
	err := e.s.IdempotencyComplete(e.ctx, &twicestore.IdempotencyCompleteParams{Principal: "alice", Key: "key-1", Status: 200})
	if !errors.Is(err, twicestore.ErrNotFound) {
		t.Errorf("IdempotencyComplete of a released record = %v, want an error wrapping ErrNotFound", err)
	}
}

// idemRace runs n Begins of ps at once and fails the test unless exactly
// one took the key; it returns the index of that one.
func (e *env) idemRace(ps []*twicestore.IdempotencyBeginParams) int {
	e.t.Helper()
	results := make([]*twicestore.IdempotencyBeginResult, len(ps))
	errs := make([]error, len(ps))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range ps {
		wg.Go(func() {
			<-start
			results[i], errs[i] = e.s.IdempotencyBegin(e.ctx, ps[i])
		})
	}
	close(start)
	wg.Wait()
	winner := -1
	for i, err := range errs {
		if err != nil {
			e.t.Fatalf("IdempotencyBegin %d: %v", i, err)
		}
		if results[i].Taken {
			if winner >= 0 {
				e.t.Fatalf("Begins %d and %d both took the key", winner, i)
			}
			winner = i
		}
	}
	if winner < 0 {
		e.t.Fatal("no Begin took the key")
	}
	for i, res := range results {
		if i != winner && (res.Record.Done || res.Record.Fingerprint != ps[winner].Fingerprint) {
			e.t.Errorf("Begin %d: record %s, want the running one of Begin %d", i, fmtIdem(res.Record), winner)
		}
	}
	return winner
}

func testIdemConcurrent(_ *testing.T, e *env) {
	ps := make([]*twicestore.IdempotencyBeginParams, 50)
	for i := range ps {
		ps[i] = idemBegin("alice", "race", fmt.Sprintf("fp-%d", i), e.base)
	}
	e.idemRace(ps)
}

// testIdemConcurrentTakeOver: retries of the crashed request race with
// other requests for its stale key; exactly one retry takes it.
func testIdemConcurrentTakeOver(t *testing.T, e *env) {
	e.idemBegin(idemBegin("alice", "race", "fp-crashed", e.base))
	now := e.at(2 * idemStale)
	ps := make([]*twicestore.IdempotencyBeginParams, 50)
	for i := range ps {
		fp := "fp-crashed"
		if i%2 == 1 {
			fp = fmt.Sprintf("fp-other-%d", i)
		}
		ps[i] = idemBegin("alice", "race", fp, now)
	}
	w := e.idemRace(ps)
	if ps[w].Fingerprint != "fp-crashed" {
		t.Fatalf("Begin %d with %s took the key over, want only a retry of the crashed request", w, ps[w].Fingerprint)
	}
	want := takenRecord(ps[w])
	want.CreatedAt = e.base
	checkBegin(t, "Begin after the race", e.idemBegin(idemBegin("alice", "race", "fp-late", now.Add(time.Second))), false, want)
}

func testIdemPrune(t *testing.T, e *env) {
	prune := func(before time.Time, limit int) int {
		t.Helper()
		res, err := e.s.IdempotencyPrune(e.ctx, &twicestore.IdempotencyPruneParams{Before: before, Limit: limit})
		if err != nil {
			t.Fatalf("IdempotencyPrune(limit %d): %v", limit, err)
		}
		return res.Deleted
	}
	if n := prune(e.at(time.Hour), 10); n != 0 {
		t.Fatalf("IdempotencyPrune of an empty store deleted %d", n)
	}
	// Five records expiring one hour apart, the second one done.
	for i := 1; i <= 5; i++ {
		p := idemBegin("alice", fmt.Sprintf("key-%d", i), "fp", e.base)
		p.ExpiresAt = e.at(time.Duration(i) * time.Hour)
		e.idemBegin(p)
	}
	e.idemComplete(&twicestore.IdempotencyCompleteParams{Principal: "alice", Key: "key-2", Status: 200})
	before := e.at(3 * time.Hour) // key-1 and key-2 expired before it; key-3 expires at it
	if n := prune(before, 0); n != 0 {
		t.Fatalf("IdempotencyPrune with a zero Limit deleted %d, want 0", n)
	}
	if n := prune(before, 1); n != 1 {
		t.Fatalf("IdempotencyPrune with Limit 1 deleted %d, want 1", n)
	}
	// The pass's cursor: the batch after it looks at no record that
	// expired before the one it deleted.
	first, err := e.s.IdempotencyPrune(e.ctx, &twicestore.IdempotencyPruneParams{Before: before, Limit: 1, From: e.at(90 * time.Minute)})
	if err != nil || first.Deleted != 1 || !first.From.Equal(e.at(2*time.Hour)) {
		t.Fatalf("IdempotencyPrune from a cursor = %+v, %v; want key-2 deleted and the cursor at its expiry, %s", first, err, e.at(2*time.Hour))
	}
	p := idemBegin("alice", "key-1", "fp", e.base) // taken afresh: key-1 was pruned
	p.ExpiresAt = e.at(time.Hour)
	e.idemBegin(p)
	if next, err := e.s.IdempotencyPrune(e.ctx, &twicestore.IdempotencyPruneParams{Before: before, Limit: 10, From: first.From}); err != nil ||
		next.Deleted != 0 || !next.From.Equal(first.From) {
		t.Fatalf("the next batch = %+v, %v; want the record behind the cursor left to the next pass, the cursor kept", next, err)
	}
	if n := prune(before, 10); n != 1 {
		t.Fatalf("IdempotencyPrune of the rest (a new pass) deleted %d, want 1", n)
	}
	if n := prune(before, 10); n != 0 {
		t.Fatalf("IdempotencyPrune again deleted %d, want 0", n)
	}
	// Seen from before any expiry, a kept record holds its key; a pruned
	// one is gone and the key is taken afresh.
	for i := 1; i <= 5; i++ {
		res := e.idemBegin(idemBegin("alice", fmt.Sprintf("key-%d", i), "fp", e.at(time.Second)))
		if kept := i >= 3; res.Taken == kept {
			t.Errorf("key-%d: Begin after the prune Taken = %t, want %t", i, res.Taken, !kept)
		}
	}
}

func testIdemTx(t *testing.T, e *env) {
	tx := e.begin()
	p := idemBegin("alice", "key-1", "fp-tx", e.base)
	checkBegin(t, "Begin in a transaction", e.idemBeginWith(tx, p), true, takenRecord(p))
	checkBegin(t, "Begin again in the transaction",
		e.idemBeginWith(tx, idemBegin("alice", "key-1", "fp-2", e.at(time.Second))), false, takenRecord(p))
	if err := tx.Rollback(e.ctx); err != nil {
		t.Fatal(err)
	}
	after := idemBegin("alice", "key-1", "fp-after", e.at(2*time.Second))
	checkBegin(t, "Begin after rollback", e.idemBegin(after), true, takenRecord(after))
}

// testIdemFenced: after a take-over, the first request's late Complete and
// Release, carrying its own lock, touch nothing; the new holder's work.
func testIdemFenced(t *testing.T, e *env) {
	first := e.idemBegin(idemBegin("alice", "fenced", "fp-1", e.at(0)))
	second := e.idemBegin(idemBegin("alice", "fenced", "fp-1", e.at(idemStale+time.Second)))
	if !first.Taken || !second.Taken {
		t.Fatalf("taken: first %v, take-over %v; want both", first.Taken, second.Taken)
	}
	err := e.s.IdempotencyComplete(e.ctx, &twicestore.IdempotencyCompleteParams{
		Principal: "alice", Key: "fenced", LockedAt: first.Record.LockedAt, Status: 500, Body: []byte("late")})
	if !errors.Is(err, twicestore.ErrNotFound) {
		t.Fatalf("stale holder's Complete = %v, want an error wrapping ErrNotFound", err)
	}
	if err := e.s.IdempotencyRelease(e.ctx, &twicestore.IdempotencyKeyParams{
		Principal: "alice", Key: "fenced", LockedAt: first.Record.LockedAt}); err != nil {
		t.Fatalf("stale holder's Release: %v", err)
	}
	again := e.idemBegin(idemBegin("alice", "fenced", "fp-1", e.at(idemStale+2*time.Second)))
	if again.Taken || again.Record.Done || !again.Record.LockedAt.Equal(second.Record.LockedAt) {
		t.Fatalf("after the stale holder's writes: taken %v done %v locked %s; want the new holder's running record",
			again.Taken, again.Record.Done, again.Record.LockedAt)
	}
	e.idemComplete(&twicestore.IdempotencyCompleteParams{
		Principal: "alice", Key: "fenced", LockedAt: second.Record.LockedAt, Status: 201, Body: []byte("new")})
	done := e.idemBegin(idemBegin("alice", "fenced", "fp-1", e.at(idemStale+3*time.Second)))
	if !done.Record.Done || done.Record.Status != 201 || string(done.Record.Body) != "new" {
		t.Fatalf("new holder's response not stored: %+v", done.Record)
	}
}
