package twice_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/testkit/waitfor"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// TenantSync is a job partitioned by tenant through a named field.
type TenantSync struct {
	Tenant string `json:"tenant"`
	Seq    int    `json:"seq"`
	Tags   []string
}

func (TenantSync) Kind() string { return "test.limits.tenant.v1" }

// AccountCharge gives its concurrency key by method.
type AccountCharge struct{ Account int64 }

func (AccountCharge) Kind() string             { return "test.limits.charge.v1" }
func (a AccountCharge) ConcurrencyKey() string { return fmt.Sprint("acct-", a.Account) }

// TestRegisterLimitsRefused: limits the store cannot enforce, and keys it
// cannot take from the args, are refused at registration with the kind
// named and what to do.
func TestRegisterLimitsRefused(t *testing.T) {
	tenant := twice.HandlerFunc[TenantSync](func(context.Context, *twice.Job[TenantSync]) error { return nil })
	charge := twice.HandlerFunc[AccountCharge](func(context.Context, *twice.Job[AccountCharge]) error { return nil })
	for _, tc := range []struct {
		name   string
		opts   twice.KindOpts
		method bool // register AccountCharge (key by method) instead
		want   string
	}{
		{"NegativeGlobal", twice.KindOpts{GlobalConcurrency: -1}, false, "global concurrency -1 is negative"},
		{"NegativePerKey", twice.KindOpts{KeyConcurrency: -2, ConcurrencyKey: "tenant"}, false, "per-key concurrency -2 is negative"},
		{"RateZeroLimit", twice.KindOpts{RateLimit: twice.RateLimit{Period: time.Second}}, false, "the limit must be positive"},
		{"RateNegativeLimit", twice.KindOpts{RateLimit: twice.RateLimit{Limit: -5, Period: time.Second}}, false, "the limit must be positive"},
		{"RateNoPeriod", twice.KindOpts{RateLimit: twice.RateLimit{Limit: 5}}, false, "the period must be at least 1ms"},
		{"RateShortPeriod", twice.KindOpts{RateLimit: twice.RateLimit{Limit: 5, Period: 999 * time.Microsecond}}, false, "the period must be at least 1ms"},
		{"KeyRateShortPeriod", twice.KindOpts{ConcurrencyKey: "tenant", KeyRateLimit: twice.RateLimit{Limit: 1, Period: time.Microsecond}}, false, "per-key rate limit"},
		{"KeyFieldMissing", twice.KindOpts{KeyConcurrency: 1, ConcurrencyKey: "Tenant"}, false, `field "Tenant", which twice_test.TenantSync does not have`},
		{"KeyFieldNotPrimitive", twice.KindOpts{KeyConcurrency: 1, ConcurrencyKey: "Tags"}, false, `field "Tags" of JSON type array`},
		{"KeyWithoutPerKeyLimit", twice.KindOpts{GlobalConcurrency: 3, ConcurrencyKey: "tenant"}, false, "no per-key limit uses it"},
		{"SkipRetriesWithoutPerKeyLimit", twice.KindOpts{GlobalConcurrency: 3, KeyOrderSkipsRetries: true}, false, "KeyOrderSkipsRetries is set but KeyConcurrency is not"},
		{"PerKeyLimitWithoutKey", twice.KindOpts{KeyConcurrency: 1}, false, "a per-key limit needs a key"},
		{"FieldAndMethod", twice.KindOpts{KeyConcurrency: 1, ConcurrencyKey: "Account"}, true, "has a ConcurrencyKey method: keep one"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			kind := TenantSync{}.Kind()
			if tc.method {
				kind = AccountCharge{}.Kind()
				err = twice.Register(twice.NewRegistry(), charge, &tc.opts)
			} else {
				err = twice.Register(twice.NewRegistry(), tenant, &tc.opts)
			}
			if err == nil {
				t.Fatalf("registered with %+v", tc.opts)
			}
			if !strings.Contains(err.Error(), fmt.Sprintf("%q", kind)) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q: want the kind %q and %q", err, kind, tc.want)
			}
		})
	}
	for _, ok := range []twice.KindOpts{
		{GlobalConcurrency: 5},
		{KeyConcurrency: 1, ConcurrencyKey: "tenant"},
		{KeyConcurrency: 1, ConcurrencyKey: "seq", RateLimit: twice.RateLimit{Limit: 100, Period: time.Second}},
		{ConcurrencyKey: "tenant", KeyRateLimit: twice.RateLimit{Limit: 5, Period: time.Millisecond}},
	} {
		if err := twice.Register(twice.NewRegistry(), tenant, &ok); err != nil {
			t.Errorf("register with %+v: %v", ok, err)
		}
	}
	if err := twice.Register(twice.NewRegistry(), charge, &twice.KindOpts{KeyConcurrency: 1}); err != nil {
		t.Errorf("register with a key by method: %v", err)
	}
}

// TestEnqueueConcurrencyKeyTooLong: a key over MaxConcurrencyKeyBytes is
// refused at enqueue as invalid args, naming the kind.
func TestEnqueueConcurrencyKeyTooLong(t *testing.T) {
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[TenantSync](func(context.Context, *twice.Job[TenantSync]) error { return nil }),
		&twice.KindOpts{KeyConcurrency: 1, ConcurrencyKey: "tenant"})
	c, err := twice.NewClient(newStore(t), testConfig(reg))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Enqueue(t.Context(), TenantSync{Tenant: strings.Repeat("t", twice.MaxConcurrencyKeyBytes+1)}, nil)
	if !errors.Is(err, twice.ErrInvalidArgs) || !strings.Contains(err.Error(), "concurrency key") ||
		!strings.Contains(err.Error(), TenantSync{}.Kind()) {
		t.Fatalf("enqueue of a long key: %v, want ErrInvalidArgs naming the kind and the concurrency key", err)
	}
	if _, err := c.Enqueue(t.Context(), TenantSync{Tenant: strings.Repeat("t", twice.MaxConcurrencyKeyBytes)}, nil); err != nil {
		t.Fatalf("enqueue of a key at the cap: %v", err)
	}
}

// TestLimitsEndToEnd runs 40 jobs over 4 tenants through a client with 8
// workers, a global limit of 2 and one job per tenant at a time: the
// handlers never see more than 2 running or two of a tenant, each tenant's
// jobs run in enqueue order, and LimitList counts them throttled while
// they wait, then nothing once all ran.
func TestLimitsEndToEnd(t *testing.T) {
	const tenants, perTenant = 4, 10
	var (
		mu       sync.Mutex
		running  int
		peak     int
		busy     = map[string]bool{}
		order    = map[string][]int{}
		finished = make(chan struct{}, tenants*perTenant)
		release  = make(chan struct{})
		fail     []string
	)
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[TenantSync](func(_ context.Context, job *twice.Job[TenantSync]) error {
		mu.Lock()
		running++
		peak = max(peak, running)
		if busy[job.Args.Tenant] {
			fail = append(fail, fmt.Sprintf("tenant %s: job %d started while another of it runs", job.Args.Tenant, job.Args.Seq))
		}
		busy[job.Args.Tenant] = true
		order[job.Args.Tenant] = append(order[job.Args.Tenant], job.Args.Seq)
		mu.Unlock()
		<-release
		mu.Lock()
		running--
		busy[job.Args.Tenant] = false
		mu.Unlock()
		finished <- struct{}{}
		return nil
	}), &twice.KindOpts{Strategy: twice.None, GlobalConcurrency: 2, KeyConcurrency: 1, ConcurrencyKey: "tenant"})
	store := newStore(t)
	cfg := testConfig(reg)
	cfg.MaxWorkers = 8
	c, err := twice.NewClient(store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var batch []twice.EnqueueParams
	for i := range tenants * perTenant {
		batch = append(batch, twice.EnqueueParams{Args: TenantSync{Tenant: fmt.Sprint("t", i%tenants), Seq: i}})
	}
	if _, err := c.EnqueueMany(t.Context(), batch); err != nil {
		t.Fatal(err)
	}
	before, err := c.LimitList(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(before) != 1 || before[0].Due != 40 || before[0].Throttled != 38 || before[0].Keys != tenants {
		t.Errorf("LimitList before start: %+v, want 40 due, 38 throttled (2 may start), 4 keys", before)
	}
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Stop(ctx)
	}()
	// Two run, the rest wait throttled.
	waitfor.Cond(t, "two jobs running and the rest throttled", func() bool {
		u, err := c.LimitList(t.Context())
		return err == nil && len(u) == 1 && u[0].Running == 2 && u[0].Throttled == 38
	}, func() string { u, _ := c.LimitList(t.Context()); return fmt.Sprintf("%+v", u) })
	close(release)
	for range tenants * perTenant {
		waitfor.Recv(t, finished, "a job to finish")
	}
	mu.Lock()
	defer mu.Unlock()
	for _, f := range fail {
		t.Error(f)
	}
	if peak > 2 {
		t.Errorf("%d jobs ran at once, over the global limit of 2", peak)
	}
	for tenant, seqs := range order {
		for i := 1; i < len(seqs); i++ {
			if seqs[i] < seqs[i-1] {
				t.Errorf("tenant %s ran out of enqueue order: %v", tenant, seqs)
				break
			}
		}
	}
	waitfor.Cond(t, "no job running or throttled", func() bool {
		u, err := c.LimitList(t.Context())
		return err == nil && len(u) == 1 && u[0].Running == 0 && u[0].Due == 0 && u[0].Throttled == 0
	}, nil)
}

// TestConcurrencyKeyByMethod: the args' ConcurrencyKey method gives the
// stored key.
func TestConcurrencyKeyByMethod(t *testing.T) {
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[AccountCharge](func(context.Context, *twice.Job[AccountCharge]) error { return nil }),
		&twice.KindOpts{KeyConcurrency: 1})
	store := newStore(t)
	c, err := twice.NewClient(store, testConfig(reg))
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []int64{1, 1, 2} {
		if _, err := c.Enqueue(t.Context(), AccountCharge{Account: a}, nil); err != nil {
			t.Fatal(err)
		}
	}
	u, err := c.LimitList(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(u) != 1 || u[0].Keys != 2 || u[0].Due != 3 || u[0].Throttled != 1 {
		t.Errorf("LimitList: %+v, want 2 keys, 3 due, 1 throttled (account 1's second)", u)
	}
	res, err := store.JobFetch(t.Context(), &twicestore.JobFetchParams{Queue: twice.QueueDefault,
		Kinds: []string{AccountCharge{}.Kind()}, Limit: 10, Now: time.Now(), LeaseUntil: time.Now().Add(time.Minute),
		Limits: map[string]twicestore.KindLimit{AccountCharge{}.Kind(): {PerKey: 1}}})
	if err != nil || len(res.Jobs) != 2 || res.Jobs[0].State != twicetype.JobStateRunning {
		t.Errorf("fetch under the key limit: %v jobs, %v; want one per account", len(res.Jobs), err)
	}
}

// TestLimitsKeyOrderSkipsRetries: a tenant's first job fails and waits an
// hour for its retry. By default that holds the tenant's second job back
// (LimitList counts it throttled); with KindOpts.KeyOrderSkipsRetries the
// second runs meanwhile, and is not counted throttled.
func TestLimitsKeyOrderSkipsRetries(t *testing.T) {
	for _, tc := range []struct {
		name string
		skip bool
	}{{"Default", false}, {"Skip", true}} {
		t.Run(tc.name, func(t *testing.T) {
			failed, second := make(chan struct{}, 1), make(chan struct{}, 1)
			reg := twice.NewRegistry()
			twice.MustRegister(reg, twice.HandlerFunc[TenantSync](func(_ context.Context, job *twice.Job[TenantSync]) error {
				if job.Args.Seq == 0 {
					failed <- struct{}{}
					return errors.New("provider down")
				}
				second <- struct{}{}
				return nil
			}), &twice.KindOpts{Strategy: twice.None, KeyConcurrency: 1, ConcurrencyKey: "tenant", KeyOrderSkipsRetries: tc.skip})
			cfg := testConfig(reg)
			cfg.Backoff = func(int) time.Duration { return time.Hour }
			c := startClient(t, newStore(t), cfg)
			for seq := range 2 {
				if _, err := c.Enqueue(t.Context(), TenantSync{Tenant: "acme", Seq: seq}, nil); err != nil {
					t.Fatal(err)
				}
			}
			waitfor.Recv(t, failed, "the first job to fail")
			if tc.skip {
				waitfor.Recv(t, second, "the second job to run while the first waits for its retry")
				return
			}
			waitfor.Cond(t, "the second job throttled behind the retry", func() bool {
				u, err := c.LimitList(t.Context())
				return err == nil && len(u) == 1 && u[0].Due == 1 && u[0].Throttled == 1 && u[0].Running == 0
			}, func() string { u, _ := c.LimitList(t.Context()); return fmt.Sprintf("%+v", u) })
			select {
			case <-second:
				t.Fatal("the second job ran while the first waits for its retry")
			default:
			}
		})
	}
}
