// Package producer is the fetch loop of a worker: it leases available jobs
// from the store, queue by queue in priority order, whenever slots are free,
// and hands each job to a run function on its own goroutine. It wakes on a
// local notification, when slots free after a full fetch (once half a
// fetch's worth is free, or after a short cooldown: see gather), and on a
// jittered fallback timer; the database, not the notification, is the truth.
//
// A notification that comes while a fetch round is in flight starts a
// second round at once, on a goroutine of its own, instead of waiting for
// the first to return: a fetch is a write that commits (a WAL flush), and on
// a busy server it takes tens of milliseconds, so a job enqueued just after
// a round began waited for that round and then for its own, one and a half
// rounds on average. At most maxRounds rounds are in flight; each reserves
// the slots it asks for, so together they never lease more jobs than slots.
//
// Jobs run on worker goroutines that outlive one job: a worker that finishes
// takes the next dispatched job if one comes within workerIdle, so a busy
// producer does not pay a goroutine start, and a stack grown again from
// its smallest size, for every job.
package producer

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twicejobs/twice/internal/logattr"
	"github.com/twicejobs/twice/internal/periodic"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// fetchTimeout bounds one fetch statement.
const fetchTimeout = 30 * time.Second

// workerIdle is how long a worker goroutine waits for its next job before
// it exits.
const workerIdle = 2 * time.Second

// fetchCooldown is the longest the fetch loop waits, after a slot frees
// behind a full fetch, for more slots to free before it fetches again (see
// gather). A variable only so tests can lengthen it.
var fetchCooldown = 5 * time.Millisecond

// maxRounds is the most fetch rounds in flight at once: the main loop's and
// one started by a notification while it was in flight. More rounds fetch
// fewer jobs each, and each is a write the server commits; on a loaded
// machine 4 measured no better than 2. A variable only so
// BenchmarkNotifyToStart can set 1, the single round of before.
var maxRounds = 2

// Queue is one named queue and the most of its jobs run at once.
type Queue struct {
	Name        string
	Concurrency int
}

// Config configures a Producer.
type Config struct {
	Exec       twicestore.Executor
	Queues     []Queue // in priority order
	RoundRobin bool    // rotate the first queue each round instead of strict order
	MaxWorkers int     // across all queues
	// MaxWorkersFromQueues makes MaxWorkers follow the queues'
	// concurrency: SetQueueConcurrency sets it to their sum.
	MaxWorkersFromQueues bool
	// Kinds returns the kinds to fetch, asked on every round: a kind whose
	// kill switch is off is left out, so its jobs stay queued, untouched.
	Kinds        func() []string
	Node         string
	Lease        time.Duration
	PollInterval time.Duration
	FetchLimit   int // most jobs one fetch takes
	Logger       *slog.Logger
	// Peek names, per kind, the handler whose marker each fetch peeks for
	// the jobs of that kind (twicestore.JobFetchParams.Peek). Nil peeks
	// nothing.
	Peek map[string]string
	// Limits are the flow-control limits of the kinds, which every fetch
	// hands to the store (twicestore.JobFetchParams.Limits), until
	// SetLimits replaces them. Nil limits nothing.
	Limits map[string]twicestore.KindLimit
	// Run works one leased job, given with the fetch's peek of its
	// marker; it runs on a worker goroutine and the slot is freed when it
	// returns.
	Run func(Fetched)
}

// Peek is what a fetch learned about a leased job's marker. The zero value
// is NotPeeked, so an answer that never arrived can only read as "ask
// again", never as "not processed".
type Peek int8

const (
	// NotPeeked: the fetch did not peek this job's marker (its kind was
	// not named, or the store, or a wrapper of it, returned no answers).
	NotPeeked Peek = iota
	// NotProcessed: the marker did not exist when the job was leased.
	NotProcessed
	// Processed: the marker existed when the job was leased.
	Processed
)

// Fetched is a leased job and the fetch's peek of its marker.
type Fetched struct {
	Row  *twicetype.JobRow
	Peek Peek
	// FetchedAt is when the fetch that leased the job began: the time its
	// lease was counted from.
	FetchedAt time.Time
}

// Producer fetches and dispatches jobs.
type Producer struct {
	cfg    Config
	wake   chan struct{}
	freed  chan struct{}
	mu     sync.Mutex
	active map[string]int // queue -> running count
	total  int
	// concurrency is each queue's most running jobs, and maxWorkers the
	// most over all: Config's, until SetQueueConcurrency changes them.
	concurrency map[string]int
	maxWorkers  int
	// limits are the kinds' limits every fetch hands to the store:
	// Config.Limits until SetLimits replaces them. A fetch round reads
	// them once.
	limits atomic.Pointer[map[string]twicestore.KindLimit]
	// reserved are the slots that fetches in flight asked for, per queue
	// and in all: free counts them as taken.
	reserved      map[string]int
	reservedTotal int
	// inRound is set while the main loop's fetch round is in flight, and
	// extra counts the notifications' rounds in flight; roundCtx is the main loop's
	// context, stopped is set when it returns. All guarded by mu.
	inRound  bool
	extra    int // notification rounds in flight
	stopped  bool
	roundCtx context.Context
	extras   sync.WaitGroup // notification rounds
	wg       sync.WaitGroup // running jobs
	done     chan struct{}  // closed when Run returns: no more dispatches
	rotate   int
	// handoff passes a dispatched job to an idle worker; unbuffered, so a
	// job is only handed to a worker that is waiting for one.
	handoff chan Fetched
	// throttled is set when the last fetch round's fetches left due jobs
	// that a limit held back.
	throttled atomic.Bool
	workers   sync.WaitGroup // worker goroutines, busy or idle
	// holding, when set, is told each time gather holds the fetch back for
	// more free slots (free of the want it waits for): what a test records
	// to know the loop saw a freed slot and did not fetch.
	holding func(free, want int)
}

// New returns a producer; Run starts it.
func New(cfg Config) *Producer {
	p := &Producer{
		cfg:         cfg,
		wake:        make(chan struct{}, 1),
		freed:       make(chan struct{}, 1),
		active:      make(map[string]int),
		concurrency: make(map[string]int, len(cfg.Queues)),
		maxWorkers:  cfg.MaxWorkers,
		reserved:    make(map[string]int),
		done:        make(chan struct{}),
		handoff:     make(chan Fetched),
	}
	for _, q := range cfg.Queues {
		p.concurrency[q.Name] = q.Concurrency
	}
	p.limits.Store(&cfg.Limits)
	return p
}

// SetQueueConcurrency changes the most running jobs of the queues named
// in concurrency (others keep theirs), and MaxWorkers with them when
// MaxWorkersFromQueues. A queue lowered below its running jobs lets them
// finish and starts no more until it is under again; a queue raised is
// fetched for at once.
func (p *Producer) SetQueueConcurrency(concurrency map[string]int) {
	p.mu.Lock()
	for _, q := range p.cfg.Queues {
		if n, ok := concurrency[q.Name]; ok {
			p.concurrency[q.Name] = n
		}
	}
	if p.cfg.MaxWorkersFromQueues {
		p.maxWorkers = 0
		for _, n := range p.concurrency {
			p.maxWorkers += n
		}
	}
	p.mu.Unlock()
	p.Notify()
}

// SetLimits replaces the kinds' limits the fetches hand to the store,
// from the next fetch on; a raised limit may let held jobs start, so it
// asks for a fetch at once. limits must not be changed after.
func (p *Producer) SetLimits(limits map[string]twicestore.KindLimit) {
	p.limits.Store(&limits)
	p.Notify()
}

// Notify asks for a fetch soon (a job was just enqueued, say): at once on
// a goroutine of its own if the main loop's round is in flight (and no
// other notification's is), else as the main loop's next round.
func (p *Producer) Notify() {
	if p.roundNow() {
		return
	}
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// NotifyThrottled asks for a fetch soon if the last fetch round left due
// jobs that a limit held back (twicestore.JobFetchResult.Throttled): a
// limited kind's slot was freed, and they may start now. When nothing was
// held back it does nothing, so a burn-down under a limit that never
// binds fetches no more often than one without.
func (p *Producer) NotifyThrottled() {
	if p.throttled.Load() {
		p.Notify()
	}
}

// roundNow starts a fetch round on a goroutine of its own if the main
// loop's is in flight and fewer than maxRounds are, and reports whether it
// did. When that round leaves work behind (its fetch came back full,
// throttled or failed) it wakes the main loop, whose own round may have
// ended meanwhile, so nothing waits for the poll timer.
func (p *Producer) roundNow() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.inRound || p.extra >= maxRounds-1 || p.stopped {
		return false
	}
	p.extra++
	p.extras.Add(1)
	ctx := p.roundCtx
	go func() {
		defer p.extras.Done()
		full, retryAt, err := p.fetchRound(ctx)
		p.mu.Lock()
		p.extra--
		p.mu.Unlock()
		if full || err != nil || !retryAt.IsZero() {
			select {
			case p.wake <- struct{}{}:
			default:
			}
		}
	}()
	return true
}

// setInRound records whether the main loop's round is in flight.
func (p *Producer) setInRound(ctx context.Context, in bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.inRound, p.roundCtx = in, ctx
}

// Run fetches until ctx is done. It returns without waiting for running
// jobs; Wait does that.
func (p *Producer) Run(ctx context.Context) {
	defer close(p.done)
	defer func() {
		// No notification round starts any more, and the one in flight
		// dispatches before done closes.
		p.mu.Lock()
		p.stopped = true
		p.mu.Unlock()
		p.extras.Wait()
	}()
	logger := p.cfg.Logger.With(logattr.Component, "producer")
	backoff := p.cfg.PollInterval
	for {
		p.setInRound(ctx, true)
		full, retryAt, err := p.fetchRound(ctx)
		p.setInRound(ctx, false)
		if err != nil && ctx.Err() == nil {
			logger.ErrorContext(ctx, "fetching jobs failed; retrying", logattr.Err, err)
		}
		wait := periodic.Jitter(backoff)
		if !retryAt.IsZero() {
			// A rate window frees a start then: be there.
			wait = max(min(wait, time.Until(retryAt)), time.Millisecond)
		}
		timer := time.NewTimer(wait)
		freed := p.freed
		if !full {
			freed = nil // a freed slot only matters when work is likely waiting
		}
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-p.wake:
		case <-freed:
			p.gather(ctx)
		case <-timer.C:
		}
		timer.Stop()
	}
}

// gather waits, after a slot freed behind a full fetch, until half a
// fetch's worth of slots is free, for at most fetchCooldown, or until a
// notification or shutdown. Jobs that finish fast free their slots one by
// one; fetching at the first would lease a few jobs a statement, and
// every fetch is a write the server commits and an index walk over the
// entries the previous fetches left behind. A slow handler's slot waits
// at most the cooldown.
func (p *Producer) gather(ctx context.Context) {
	p.mu.Lock()
	want := max(1, min(p.cfg.FetchLimit, p.maxWorkers)/2)
	p.mu.Unlock()
	if p.fetchable() >= want {
		return
	}
	t := time.NewTimer(fetchCooldown)
	defer t.Stop()
	for {
		free := p.fetchable()
		if free >= want {
			return
		}
		if p.holding != nil {
			p.holding(free, want)
		}
		select {
		case <-ctx.Done():
			return
		case <-p.wake:
			return
		case <-p.freed:
		case <-t.C:
			return
		}
	}
}

// fetchable is how many jobs a fetch round could lease now, over all
// queues.
func (p *Producer) fetchable() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, q := range p.cfg.Queues {
		n += max(0, p.concurrency[q.Name]-p.active[q.Name]-p.reserved[q.Name])
	}
	return min(n, p.maxWorkers-p.total-p.reservedTotal)
}

// Wait blocks until Run has returned, every dispatched job's run function
// has returned and the worker goroutines have exited.
func (p *Producer) Wait() {
	<-p.done
	p.wg.Wait()
	p.workers.Wait()
}

// Running reports how many jobs are running.
func (p *Producer) Running() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.total
}

// fetchRound fetches for each queue with free slots. full reports whether
// some fetch came back with as many jobs as it asked for, so more are
// probably waiting.
// retryAt is the earliest time a rate limit frees a start for jobs it held
// back (twicestore.JobFetchResult.RetryAt), zero when none did.
func (p *Producer) fetchRound(ctx context.Context) (full bool, retryAt time.Time, err error) {
	throttled := false
	defer func() { p.throttled.Store(throttled) }()
	kinds := p.cfg.Kinds()
	if len(kinds) == 0 {
		return false, time.Time{}, nil
	}
	limits := *p.limits.Load()
	n := len(p.cfg.Queues)
	start := 0
	if p.cfg.RoundRobin && n > 0 {
		p.mu.Lock()
		start = p.rotate % n
		p.rotate++
		p.mu.Unlock()
	}
	for i := range n {
		if ctx.Err() != nil {
			return false, time.Time{}, nil
		}
		q := p.cfg.Queues[(start+i)%n]
		limit := p.reserve(q)
		if limit <= 0 {
			if p.globalFree() <= 0 {
				return true, retryAt, nil
			}
			continue
		}
		now := time.Now()
		// A fetch that committed must be dispatched, so the statement runs
		// to its end even when shutdown begins meanwhile.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), fetchTimeout)
		res, ferr := p.cfg.Exec.JobFetch(fctx, &twicestore.JobFetchParams{
			Queue:      q.Name,
			Kinds:      kinds,
			Limit:      limit,
			Node:       p.cfg.Node,
			Now:        now,
			LeaseUntil: now.Add(p.cfg.Lease),
			Peek:       p.cfg.Peek,
			Limits:     limits,
		})
		cancel()
		if ferr != nil {
			p.settle(q.Name, limit, 0)
			return false, retryAt, ferr
		}
		p.settle(q.Name, limit, len(res.Jobs))
		// A throttled fetch left due jobs that a freed slot lets start.
		if len(res.Jobs) == limit || res.Throttled {
			full = true
		}
		throttled = throttled || res.Throttled
		if !res.RetryAt.IsZero() && (retryAt.IsZero() || res.RetryAt.Before(retryAt)) {
			retryAt = res.RetryAt
		}
		// A store wrapper may hand back no answers, or not one per job:
		// then the jobs go without one and peek for themselves.
		answered := len(res.Processed) == len(res.Jobs)
		for i, row := range res.Jobs {
			f := Fetched{Row: row, FetchedAt: now}
			if _, peeked := p.cfg.Peek[row.Kind]; peeked && answered {
				f.Peek = NotProcessed
				if res.Processed[i] {
					f.Peek = Processed
				}
			}
			p.start(f)
		}
	}
	return full, retryAt, nil
}

// free is how many more jobs of q may be leased now.
func (p *Producer) free(q Queue) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.freeLocked(q)
}

func (p *Producer) freeLocked(q Queue) int {
	return min(p.concurrency[q.Name]-p.active[q.Name]-p.reserved[q.Name], p.maxWorkers-p.total-p.reservedTotal)
}

// reserve takes the slots of q a fetch may fill now, at most FetchLimit,
// so a concurrent round does not count them free; settle gives them back.
func (p *Producer) reserve(q Queue) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := min(p.freeLocked(q), p.cfg.FetchLimit)
	if n > 0 {
		p.reserved[q.Name] += n
		p.reservedTotal += n
	}
	return n
}

// settle returns a fetch's reserved slots of queue and takes one for each
// of the leased jobs it dispatches next, in one step, so no round sees
// those slots free in between.
func (p *Producer) settle(queue string, reserved, leased int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reserved[queue] -= reserved
	p.reservedTotal -= reserved
	p.active[queue] += leased
	p.total += leased
}

func (p *Producer) globalFree() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.maxWorkers - p.total - p.reservedTotal
}

// dispatch takes a slot for f and starts it.
func (p *Producer) dispatch(f Fetched) {
	p.mu.Lock()
	p.active[f.Row.Queue]++
	p.total++
	p.mu.Unlock()
	p.start(f)
}

// start runs f, whose slot is taken, on an idle worker or a new one.
func (p *Producer) start(f Fetched) {
	p.wg.Add(1)
	select {
	case p.handoff <- f: // an idle worker took it
	default:
		p.workers.Add(1)
		go p.worker(f)
	}
}

// worker runs f, then the jobs handed to it, until none comes for
// workerIdle or Run has returned (no job will come any more).
func (p *Producer) worker(f Fetched) {
	defer p.workers.Done()
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		p.runOne(f)
		idle.Reset(workerIdle)
		var ok bool
		if f, ok = p.next(idle); !ok {
			return
		}
	}
}

// idleStackPad is how much stack an idle worker keeps in use while it
// waits for its next job. The garbage collector halves the stack of a
// goroutine that uses less than a quarter of it, and a worker waiting at
// the top of its stack uses almost none: each collection shrank the idle
// workers' stacks and their next jobs grew them again, copying them both
// times (12 to 15 % of a burn-down's CPU in the profile). Waiting in a
// frame this large keeps a stack of up to four times its size.
const idleStackPad = 4 << 10

// next waits for the worker's next job, until idle fires or Run has
// returned (ok false). Its frame holds idleStackPad bytes; see there.
//
//go:noinline
func (p *Producer) next(idle *time.Timer) (f Fetched, ok bool) {
	var pad [idleStackPad]byte
	keepOnStack(pad[:])
	select {
	case f = <-p.handoff:
		return f, true
	case <-idle.C:
		return Fetched{}, false
	case <-p.done:
		return Fetched{}, false
	}
}

// keepOnStack does nothing with b; calling it keeps b's array, which does
// not escape, in its caller's frame.
//
//go:noinline
func keepOnStack(b []byte) { _ = b }

func (p *Producer) runOne(f Fetched) {
	defer p.wg.Done()
	defer p.release(f.Row.Queue)
	p.cfg.Run(f)
}

func (p *Producer) release(queue string) {
	p.mu.Lock()
	p.active[queue]--
	p.total--
	p.mu.Unlock()
	select {
	case p.freed <- struct{}{}:
	default:
	}
}
