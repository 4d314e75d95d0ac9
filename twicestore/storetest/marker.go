package storetest

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

var markerTests = []test{
	{"PeekClaimClaimAgain", testMarkerClaim},
	{"ScopedByHandler", testMarkerScoped},
	{"ReleaseThenClaim", testMarkerRelease},
	{"PruneOldUpToLimit", testMarkerPrune},
	{"ConcurrentClaimsOneWinner", testMarkerConcurrent},
	{"ClaimantRecorded", testMarkerClaimant},
}

// testMarkerClaimant: a claim records the job and epoch that made it, and a
// refused claim reports the claim that was there, so a redelivered job can
// tell its own interrupted claim from another message's.
func testMarkerClaimant(t *testing.T, e *env) {
	first := &twicestore.MarkerParams{Handler: "h.charge", Key: "msg-1", Now: e.base, JobID: 41, Epoch: 3}
	res, err := e.s.MarkerClaim(e.ctx, first)
	if err != nil || res.AlreadyProcessed || res.Existing != nil {
		t.Fatalf("first claim = %+v, %v; want a fresh claim", res, err)
	}
	again := &twicestore.MarkerParams{Handler: "h.charge", Key: "msg-1", Now: e.at(time.Minute), JobID: 41, Epoch: 4}
	res, err = e.s.MarkerClaim(e.ctx, again)
	if err != nil || !res.AlreadyProcessed {
		t.Fatalf("second claim = %+v, %v; want AlreadyProcessed", res, err)
	}
	want := twicetype.Marker{Handler: "h.charge", Key: "msg-1", ProcessedAt: e.base, JobID: 41, Epoch: 3}
	if res.Existing == nil || !markerEqual(*res.Existing, want) {
		t.Fatalf("second claim's Existing = %+v, want %+v", res.Existing, want)
	}
	if got := e.marker("h.charge", "msg-1"); !markerEqual(*got, want) {
		t.Fatalf("peeked marker = %+v, want %+v", got, want)
	}
	// Without a claimant, a claim records none.
	e.claim("h.charge", "msg-2", e.base)
	if got := e.marker("h.charge", "msg-2"); got.JobID != 0 || got.Epoch != 0 {
		t.Fatalf("claim without claimant recorded job %d epoch %d", got.JobID, got.Epoch)
	}
	if res, err := e.s.MarkerPeek(e.ctx, &twicestore.MarkerParams{Handler: "h.charge", Key: "msg-3"}); err != nil || res.Processed || res.Marker != nil {
		t.Fatalf("peek of an unclaimed key = %+v, %v", res, err)
	}
}

func markerEqual(a, b twicetype.Marker) bool {
	return a.Handler == b.Handler && a.Key == b.Key && a.ProcessedAt.Equal(b.ProcessedAt) &&
		a.JobID == b.JobID && a.Epoch == b.Epoch
}

// marker peeks a claim that must exist and returns it.
func (e *env) marker(handler, key string) *twicetype.Marker {
	e.t.Helper()
	res, err := e.s.MarkerPeek(e.ctx, &twicestore.MarkerParams{Handler: handler, Key: key})
	if err != nil {
		e.t.Fatalf("MarkerPeek(%q, %q): %v", handler, key, err)
	}
	if !res.Processed || res.Marker == nil {
		e.t.Fatalf("MarkerPeek(%q, %q) = %+v: no claim", handler, key, res)
	}
	return res.Marker
}

func testMarkerClaim(t *testing.T, e *env) {
	if e.peek("h.email", "msg-1") {
		t.Fatal("peek before any claim: processed")
	}
	if e.claim("h.email", "msg-1", e.base) {
		t.Fatal("first claim: AlreadyProcessed")
	}
	if !e.claim("h.email", "msg-1", e.at(time.Second)) {
		t.Fatal("second claim: not AlreadyProcessed")
	}
	if !e.peek("h.email", "msg-1") {
		t.Fatal("peek after claim: not processed")
	}
}

func testMarkerScoped(t *testing.T, e *env) {
	e.claim("h.email", "msg-1", e.base)
	if e.peek("h.audit", "msg-1") {
		t.Fatal("another handler's claim is visible")
	}
	if e.claim("h.audit", "msg-1", e.base) {
		t.Fatal("claim by another handler: AlreadyProcessed")
	}
	if e.peek("h.email", "msg-2") {
		t.Fatal("another key's claim is visible")
	}
}

func testMarkerRelease(t *testing.T, e *env) {
	e.claim("h.charge", "msg-1", e.base)
	e.claim("h.other", "msg-1", e.base)
	release := func(handler, key string) {
		t.Helper()
		if err := e.s.MarkerRelease(e.ctx, &twicestore.MarkerParams{Handler: handler, Key: key}); err != nil {
			t.Fatalf("MarkerRelease(%q, %q): %v", handler, key, err)
		}
	}
	release("h.charge", "msg-1")
	if e.peek("h.charge", "msg-1") {
		t.Fatal("released marker still processed")
	}
	if !e.peek("h.other", "msg-1") {
		t.Fatal("release removed another handler's claim")
	}
	if e.claim("h.charge", "msg-1", e.at(time.Second)) {
		t.Fatal("claim after release: AlreadyProcessed")
	}
	release("h.never", "claimed") // releasing an unclaimed pair is not an error
}

func testMarkerPrune(t *testing.T, e *env) {
	ages := []time.Duration{-3 * time.Hour, -2 * time.Hour, -time.Hour, 0}
	for i, age := range ages {
		e.claim("h.prune", fmt.Sprint(i), e.at(age))
	}
	var from time.Time // the pass's cursor
	prune := func(limit int) int {
		t.Helper()
		res, err := e.s.MarkerPrune(e.ctx, &twicestore.MarkerPruneParams{Before: e.at(-30 * time.Minute), Limit: limit, From: from})
		if err != nil {
			t.Fatalf("MarkerPrune: %v", err)
		}
		from = res.From
		return res.Deleted
	}
	if n := prune(2); n != 2 {
		t.Fatalf("prune with Limit 2 deleted %d", n)
	}
	if e.peek("h.prune", "0") || e.peek("h.prune", "1") || !e.peek("h.prune", "2") {
		t.Fatal("prune did not delete the oldest markers first")
	}
	if !from.Equal(e.at(-2 * time.Hour)) {
		t.Fatalf("cursor after the first batch %s, want the later of the two deleted, %s", from, e.at(-2*time.Hour))
	}
	// A marker older than the cursor, claimed meanwhile (by a node whose
	// clock is behind): the pass goes on past it, the next pass takes it.
	e.claim("h.prune", "behind", e.at(-4*time.Hour))
	if n := prune(10); n != 1 || !e.peek("h.prune", "behind") {
		t.Fatalf("second prune deleted %d, want 1, and not the marker behind the cursor", n)
	}
	if n := prune(10); n != 0 || !from.Equal(e.at(-time.Hour)) {
		t.Fatalf("third prune deleted %d (cursor %s), want 0 and the cursor kept at %s", n, from, e.at(-time.Hour))
	}
	from = time.Time{} // the next pass
	if n := prune(10); n != 1 || e.peek("h.prune", "behind") {
		t.Fatalf("a new pass deleted %d, want the marker behind the old cursor", n)
	}
	if !e.peek("h.prune", "3") {
		t.Fatal("prune deleted a marker newer than Before")
	}
}

func testMarkerConcurrent(t *testing.T, e *env) {
	const claimers = 16
	var (
		wins atomic.Int32
		wg   sync.WaitGroup
	)
	for range claimers {
		wg.Go(func() {
			res, err := e.s.MarkerClaim(e.ctx, &twicestore.MarkerParams{Handler: "h.race", Key: "k", Now: e.base})
			if err != nil {
				t.Errorf("MarkerClaim: %v", err)
				return
			}
			if !res.AlreadyProcessed {
				wins.Add(1)
			}
		})
	}
	wg.Wait()
	if n := wins.Load(); n != 1 {
		t.Fatalf("%d of %d concurrent claims won, want exactly 1", n, claimers)
	}
}
