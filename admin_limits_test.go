package twice_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/testkit/waitfor"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

func intp(n int) *int { return &n }

// limitsRegistry registers TenantSync limited to 2 running and 1 per
// tenant, and chargeArgs with no limit.
func limitsRegistry(t testing.TB) *twice.Registry {
	t.Helper()
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[TenantSync](func(context.Context, *twice.Job[TenantSync]) error { return nil }),
		&twice.KindOpts{Strategy: twice.None, GlobalConcurrency: 2, KeyConcurrency: 1, ConcurrencyKey: "tenant"})
	twice.MustRegister(reg, twice.HandlerFunc[chargeArgs](func(context.Context, *twice.Job[chargeArgs]) error { return nil }),
		&twice.KindOpts{Strategy: twice.ClaimBefore})
	return reg
}

// TestLimitOverridesRefuseBadInput: an unknown kind or queue, limits no
// store can enforce, a per-key limit for a kind with no key, and bad text
// are refused as input, and nothing is stored.
func TestLimitOverridesRefuseBadInput(t *testing.T) {
	eachStore(t, func(t *testing.T, store twicestore.Store) {
		c := adminClient(t, store, limitsRegistry(t))
		ctx := t.Context()
		tenant, charge := TenantSync{}.Kind(), chargeArgs{}.Kind()
		for name, p := range map[string]*twice.LimitSetParams{
			"no kind":              {Global: intp(1)},
			"nothing to set":       {Kind: tenant},
			"negative global":      {Kind: tenant, Global: intp(-1)},
			"negative per key":     {Kind: tenant, PerKey: intp(-2)},
			"rate with no period":  {Kind: tenant, Rate: &twice.RateLimit{Limit: 5}},
			"per key with no key":  {Kind: charge, PerKey: intp(1)},
			"key rate with no key": {Kind: charge, KeyRate: &twice.RateLimit{Limit: 1, Period: time.Second}},
			"NUL in reason":        {Kind: tenant, Global: intp(3), Reason: "a\x00b"},
			"bad UTF-8 in by":      {Kind: tenant, Global: intp(3), By: "\xff"},
			"long reason":          {Kind: tenant, Global: intp(3), Reason: strings.Repeat("x", twice.MaxReasonBytes+1)},
		} {
			_, err := c.LimitSet(ctx, p)
			if err == nil {
				t.Errorf("%s: LimitSet succeeded", name)
				continue
			}
			wantErr(t, err, twice.ErrInvalidInput)
		}
		_, err := c.LimitSet(ctx, &twice.LimitSetParams{Kind: "test.limits.tenat.v1", Global: intp(3)})
		wantErr(t, err, twice.ErrUnknownKind, twice.ErrInvalidInput)
		if !strings.Contains(err.Error(), "did you mean "+tenant) {
			t.Errorf("unknown kind error %q does not suggest %s", err, tenant)
		}
		for name, p := range map[string]*twice.QueueConcurrencySetParams{
			"zero":      {Queue: twice.QueueDefault, Concurrency: 0},
			"too many":  {Queue: twice.QueueDefault, Concurrency: twice.QueueConcurrencyMax + 1},
			"bad queue": {Queue: "Bad Queue", Concurrency: 2},
			"NUL by":    {Queue: twice.QueueDefault, Concurrency: 2, By: "\x00"},
		} {
			if _, err := c.QueueConcurrencySet(ctx, p); err == nil {
				t.Errorf("%s: QueueConcurrencySet succeeded", name)
			} else {
				wantErr(t, err, twice.ErrInvalidInput)
			}
		}
		_, err = c.QueueConcurrencySet(ctx, &twice.QueueConcurrencySetParams{Queue: "nowhere", Concurrency: 2})
		wantErr(t, err, twice.ErrUnknownQueue, twice.ErrInvalidInput)
		_, err = c.LimitReset(ctx, &twice.LimitResetParams{Kind: tenant})
		wantErr(t, err, twice.ErrNoOverride, twice.ErrInvalidInput) // no override to reset
		_, err = c.LimitHistory(ctx, &twice.LimitHistoryParams{Kind: tenant, Queue: "default"})
		wantErr(t, err, twice.ErrInvalidInput)

		if o, err := c.LimitOverrideList(ctx); err != nil || len(o) != 0 {
			t.Fatalf("after refused calls LimitOverrideList = %+v, %v; want none", o, err)
		}
		if h, err := c.LimitHistory(ctx, nil); err != nil || len(h.Changes) != 0 {
			t.Fatalf("after refused calls LimitHistory = %+v, %v; want none", h, err)
		}
	})
}

// TestLimitOverrides: a set keeps the limits it is not given, LimitList
// shows the limits in force with the compiled ones and the override, a
// kind with no compiled limit is listed once overridden, a reset goes
// back, and the history says who and why, newest first, in pages.
func TestLimitOverrides(t *testing.T) {
	eachStore(t, func(t *testing.T, store twicestore.Store) {
		c := adminClient(t, store, limitsRegistry(t))
		ctx := t.Context()
		tenant, charge := TenantSync{}.Kind(), chargeArgs{}.Kind()

		res, err := c.LimitSet(ctx, &twice.LimitSetParams{Kind: strings.ToUpper(tenant), Global: intp(5), By: "alice", Reason: "black friday"})
		if err != nil {
			t.Fatal(err)
		}
		want := twice.KindLimit{Global: 5, PerKey: 1}
		if res.Override.Name != tenant || res.Override.Limit != want || res.Previous != nil {
			t.Fatalf("LimitSet = %+v, want %s at %+v (per key kept) with no previous", res, tenant, want)
		}
		if _, err := c.LimitSet(ctx, &twice.LimitSetParams{Kind: charge, Global: intp(1), By: "bob", Reason: "provider incident"}); err != nil {
			t.Fatal(err)
		}
		usage, err := c.LimitList(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(usage) != 2 || usage[0].Kind != charge || usage[1].Kind != tenant {
			t.Fatalf("LimitList = %+v, want the charge (overridden only) and the tenant kind", usage)
		}
		ch, tn := usage[0], usage[1]
		if ch.Limit != (twice.KindLimit{Global: 1}) || !ch.Compiled.IsZero() || ch.Override == nil || ch.Override.By != "bob" {
			t.Errorf("charge usage = %+v, want global 1 in force, none compiled, bob's override", ch)
		}
		if tn.Limit != want || tn.Compiled != (twice.KindLimit{Global: 2, PerKey: 1}) || tn.Override == nil ||
			tn.Override.Reason != "black friday" {
			t.Errorf("tenant usage = %+v, want %+v in force over global 2 per key 1, alice's override", tn, want)
		}

		// A second set replaces the first, keeping its global limit.
		res, err = c.LimitSet(ctx, &twice.LimitSetParams{Kind: tenant, Rate: &twice.RateLimit{Limit: 10, Period: time.Second}, By: "carol"})
		if err != nil {
			t.Fatal(err)
		}
		if res.Previous == nil || res.Previous.By != "alice" || res.Override.Limit.Global != 5 || res.Override.Limit.Rate.Limit != 10 {
			t.Fatalf("second LimitSet = %+v, want global 5 kept, rate 10/s, alice's override as previous", res)
		}
		if _, err := c.LimitReset(ctx, &twice.LimitResetParams{Kind: charge, By: "bob", Reason: "incident over"}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.QueueConcurrencySet(ctx, &twice.QueueConcurrencySetParams{Queue: "reports", Concurrency: 3, By: "dave"}); err != nil {
			t.Fatal(err)
		}
		overrides, err := c.LimitOverrideList(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(overrides) != 2 || overrides[0].Name != tenant || overrides[1].Name != "reports" || overrides[1].Concurrency != 3 {
			t.Fatalf("LimitOverrideList = %+v, want the tenant kind's, then the reports queue's", overrides)
		}
		if usage, _ := c.LimitList(ctx); len(usage) != 1 || usage[0].Kind != tenant {
			t.Errorf("after the charge's reset LimitList = %+v, want the tenant kind alone", usage)
		}

		h, err := c.LimitHistory(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		var who []string
		for _, ch := range h.Changes {
			who = append(who, fmt.Sprintf("%s %s %s new=%t", ch.By, ch.Scope, ch.Name, ch.New != nil))
		}
		wantWho := []string{
			"dave queue reports new=true", "bob kind " + charge + " new=false", "carol kind " + tenant + " new=true",
			"bob kind " + charge + " new=true", "alice kind " + tenant + " new=true",
		}
		if strings.Join(who, "; ") != strings.Join(wantWho, "; ") {
			t.Fatalf("LimitHistory =\n%s\nwant\n%s", strings.Join(who, "\n"), strings.Join(wantWho, "\n"))
		}
		page, err := c.LimitHistory(ctx, &twice.LimitHistoryParams{Kind: tenant, Limit: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Changes) != 1 || page.Changes[0].By != "carol" || page.Next == 0 {
			t.Fatalf("first page of the tenant's history = %+v, want carol's change and a next page", page)
		}
		page, err = c.LimitHistory(ctx, &twice.LimitHistoryParams{Kind: tenant, Limit: 1, BeforeID: page.Next})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Changes) != 1 || page.Changes[0].By != "alice" || page.Next != 0 {
			t.Fatalf("second page of the tenant's history = %+v, want alice's change, the last", page)
		}
	})
}

// TestLimitListFromCatalog: a tool without a kind's registration (the
// stock CLI) lists the limits that live workers publish in the catalog,
// and may override them; a stale entry is not listed.
func TestLimitListFromCatalog(t *testing.T) {
	eachStore(t, func(t *testing.T, store twicestore.Store) {
		ctx := t.Context()
		now := time.Now()
		err := store.CatalogPublish(ctx, &twicestore.CatalogPublishParams{Node: "worker-1", Now: now, Kinds: []twicetype.KindInfo{
			{Kind: "mail.send.v1", Queue: "default", Limit: twice.KindLimit{Global: 4, Rate: twice.RateLimit{Limit: 100, Period: time.Minute}}},
			{Kind: "mail.plain.v1", Queue: "default"},
		}})
		if err != nil {
			t.Fatal(err)
		}
		err = store.CatalogPublish(ctx, &twicestore.CatalogPublishParams{Node: "gone", Now: now.Add(-time.Hour), Kinds: []twicetype.KindInfo{
			{Kind: "mail.stale.v1", Queue: "default", Limit: twice.KindLimit{Global: 1}},
		}})
		if err != nil {
			t.Fatal(err)
		}
		c := adminClient(t, store, nil)
		usage, err := c.LimitList(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(usage) != 1 || usage[0].Kind != "mail.send.v1" || usage[0].Limit.Global != 4 || usage[0].Limit.Rate.Limit != 100 || usage[0].Override != nil {
			t.Fatalf("LimitList = %+v, want mail.send.v1's published limits alone", usage)
		}
		if _, err := c.LimitSet(ctx, &twice.LimitSetParams{Kind: "mail.send.v1", Global: intp(8), By: "ops", Reason: "more smtp capacity"}); err != nil {
			t.Fatal(err)
		}
		usage, err = c.LimitList(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(usage) != 1 || usage[0].Limit.Global != 8 || usage[0].Compiled.Global != 4 || usage[0].Limit.Rate.Limit != 100 {
			t.Fatalf("LimitList after the override = %+v, want global 8 over the published 4, the rate kept", usage)
		}
		_, err = c.LimitSet(ctx, &twice.LimitSetParams{Kind: "mail.send.v1", PerKey: intp(1)})
		wantErr(t, err, twice.ErrInvalidInput) // the published kind has no key
	})
}

// limitGate is a handler that holds each job until released, counting
// the running ones.
type limitGate struct {
	mu      sync.Mutex
	running int
	release chan struct{}
	// watching, once set, has peak record the most jobs running as one
	// starts.
	watching bool
	peak     int
}

func (g *limitGate) run(ctx context.Context) error {
	g.mu.Lock()
	g.running++
	if g.watching {
		g.peak = max(g.peak, g.running)
	}
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.running--
		g.mu.Unlock()
	}()
	select {
	case <-g.release:
	case <-ctx.Done():
	}
	return nil
}

func (g *limitGate) now() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.running
}

// TestLimitOverrideAppliedByWorker: a running worker applies a kind's
// override at its next read: raised from 1 to 3, three jobs run at once;
// lowered back to 1, the running jobs finish and one at a time starts;
// each change is logged.
func TestLimitOverrideAppliedByWorker(t *testing.T) {
	gate := &limitGate{release: make(chan struct{})}
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[chargeArgs](func(ctx context.Context, _ *twice.Job[chargeArgs]) error {
		return gate.run(ctx)
	}), &twice.KindOpts{Strategy: twice.None, GlobalConcurrency: 1})
	store := newStore(t)
	cfg := testConfig(reg)
	cfg.TogglePollInterval = 20 * time.Millisecond
	var logs syncBuffer
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	c := startClient(t, store, cfg)
	ctx := t.Context()
	for i := range 6 {
		mustEnqueue(t, c, chargeArgs{ChargeID: int64(i)}, nil)
	}
	waitfor.Cond(t, "one job running, the rest throttled", func() bool {
		u, err := c.LimitList(ctx)
		return err == nil && len(u) == 1 && u[0].Running == 1 && u[0].Throttled == 5
	}, func() string { u, _ := c.LimitList(ctx); return fmt.Sprintf("%+v", u) })

	if _, err := c.LimitSet(ctx, &twice.LimitSetParams{Kind: chargeArgs{}.Kind(), Global: intp(3), By: "ops", Reason: "catch up"}); err != nil {
		t.Fatal(err)
	}
	waitfor.Cond(t, "three jobs running under the raised limit", func() bool { return gate.now() == 3 },
		func() string { return fmt.Sprint(gate.now(), " running") })
	waitfor.Cond(t, "the worker's log line for the override", func() bool {
		return strings.Contains(logs.String(), "limit override applied") && strings.Contains(logs.String(), `reason="catch up"`)
	}, logs.String)

	if _, err := c.LimitSet(ctx, &twice.LimitSetParams{Kind: chargeArgs{}.Kind(), Global: intp(1), By: "ops", Reason: "provider slow"}); err != nil {
		t.Fatal(err)
	}
	waitfor.Cond(t, "the worker's log line for the lowered limit", func() bool {
		return strings.Contains(logs.String(), `reason="provider slow"`)
	}, logs.String)
	gate.mu.Lock()
	gate.watching = true
	gate.mu.Unlock()
	close(gate.release) // the three finish; the other three start one at a time
	waitfor.Cond(t, "every job completed", func() bool {
		u, err := c.LimitList(ctx)
		return err == nil && len(u) == 1 && u[0].Running == 0 && u[0].Due == 0
	}, func() string { u, _ := c.LimitList(ctx); return fmt.Sprintf("%+v", u) })
	gate.mu.Lock()
	defer gate.mu.Unlock()
	if gate.peak != 1 {
		t.Errorf("under the lowered limit a job started with %d running, want 1 at a time", gate.peak)
	}
}

// TestQueueConcurrencyOverrideAppliedByWorker: a worker working a queue
// one job at a time runs three at once once the queue is scaled to 3
// (its MaxWorkers, left to its default, follows), and one at a time again
// once the override is reset: the running jobs finish, and the next start
// one by one.
func TestQueueConcurrencyOverrideAppliedByWorker(t *testing.T) {
	gate := &limitGate{release: make(chan struct{})}
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[chargeArgs](func(ctx context.Context, _ *twice.Job[chargeArgs]) error {
		return gate.run(ctx)
	}), &twice.KindOpts{Strategy: twice.None})
	store := newStore(t)
	cfg := testConfig(reg)
	cfg.Queues = []twice.QueueConfig{{Name: twice.QueueDefault, Concurrency: 1}}
	cfg.TogglePollInterval = 20 * time.Millisecond
	var logs syncBuffer
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	c := startClient(t, store, cfg)
	ctx := t.Context()
	var ids []int64
	for i := range 6 {
		ids = append(ids, mustEnqueue(t, c, chargeArgs{ChargeID: int64(i)}, nil).ID)
	}
	waitfor.Cond(t, "one job running", func() bool { return gate.now() == 1 }, nil)
	if _, err := c.QueueConcurrencySet(ctx, &twice.QueueConcurrencySetParams{Queue: twice.QueueDefault, Concurrency: 3, By: "ops", Reason: "backlog"}); err != nil {
		t.Fatal(err)
	}
	waitfor.Cond(t, "three jobs running in the scaled queue", func() bool { return gate.now() == 3 },
		func() string { return fmt.Sprint(gate.now(), " running") })
	if _, err := c.QueueConcurrencyReset(ctx, &twice.QueueConcurrencyResetParams{Queue: twice.QueueDefault, By: "ops", Reason: "caught up"}); err != nil {
		t.Fatal(err)
	}
	waitfor.Cond(t, "the worker's log line for the reset", func() bool {
		return strings.Contains(logs.String(), "limit override removed")
	}, logs.String)
	gate.mu.Lock()
	gate.watching = true
	gate.mu.Unlock()
	close(gate.release)
	for _, id := range ids {
		waitJob(t, store, id, "completed", isState(twicetype.JobStateCompleted))
	}
	gate.mu.Lock()
	defer gate.mu.Unlock()
	if gate.peak != 1 {
		t.Errorf("after the reset a job started with %d running, want 1 at a time", gate.peak)
	}
}
