package twice

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"sync"

	"github.com/twicejobs/twice/internal/logattr"
	"github.com/twicejobs/twice/internal/producer"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// runtimeLimits is the worker's view of the limit overrides: the limits
// of its kinds and the concurrency of its queues that it applies, each the
// operator's override when one is stored and the compiled value (KindOpts'
// limits, Config.Queues) otherwise. It reads the overrides at Start, then
// with every read of the kill switches (every TogglePollInterval, and at
// once when the store notifies a change: ToggleListener), and hands what
// changed to the fetch loop, with a log line each.
type runtimeLimits struct {
	registry *Registry
	cfg      *Config
	store    twicestore.Executor
	logger   *slog.Logger

	mu sync.Mutex // guards the three below
	// kinds are the limits of the registered kinds that have one; queues
	// the concurrency of every queue worked.
	kinds  map[string]twicestore.KindLimit
	queues map[string]int
	// applied are the overrides the values above came from, by scope and
	// name, to log only what changed.
	applied map[limitTarget]twicetype.LimitOverride
	// producer is the fetch loop told of changes, once it exists.
	producer *producer.Producer
}

// limitTarget names one override.
type limitTarget struct {
	scope twicetype.LimitScope
	name  string
}

func newRuntimeLimits(c *Client) *runtimeLimits {
	return &runtimeLimits{registry: c.registry, cfg: &c.cfg, store: c.store,
		logger: c.logger.With(logattr.Component, "limits")}
}

// load reads the overrides once, before the worker fetches anything, so
// its first fetch already applies them.
func (l *runtimeLimits) load(ctx context.Context) error {
	res, err := l.store.LimitOverrideList(ctx, &twicestore.LimitOverrideListParams{})
	if err != nil {
		return fmt.Errorf("read limit overrides: %w", err)
	}
	l.apply(ctx, res.Overrides)
	return nil
}

// refresh reads the overrides again and applies what changed; a failed
// read keeps the last ones read.
func (l *runtimeLimits) refresh(ctx context.Context) {
	res, err := l.store.LimitOverrideList(ctx, &twicestore.LimitOverrideListParams{})
	if err != nil {
		if ctx.Err() == nil {
			l.logger.WarnContext(ctx, "reading limit overrides failed; keeping the last ones read", logattr.Err, err)
		}
		return
	}
	l.apply(ctx, res.Overrides)
}

// apply computes the limits and concurrency overrides give, logs each
// override that starts, changes or ends applying here, and tells the
// fetch loop when the values changed. Overrides of kinds this worker does
// not register and of queues it does not work do not concern it.
func (l *runtimeLimits) apply(ctx context.Context, overrides []twicetype.LimitOverride) {
	kinds := l.registry.limits()
	if kinds == nil {
		kinds = map[string]twicestore.KindLimit{}
	}
	queues := make(map[string]int, len(l.cfg.Queues))
	for _, q := range l.cfg.Queues {
		queues[q.Name] = q.Concurrency
	}
	applied := map[limitTarget]twicetype.LimitOverride{}
	for _, o := range overrides {
		switch _, served := queues[o.Name]; {
		case o.Scope == twicetype.LimitScopeKind && l.registry.lookup(o.Name) != nil:
			kinds[o.Name] = o.Limit
		case o.Scope == twicetype.LimitScopeQueue && served:
			queues[o.Name] = o.Concurrency
		default:
			continue
		}
		applied[limitTarget{o.Scope, o.Name}] = o
	}
	maps.DeleteFunc(kinds, func(_ string, kl twicestore.KindLimit) bool { return kl.IsZero() })

	l.mu.Lock()
	first := l.applied == nil
	prevApplied := l.applied
	kindsChanged, queuesChanged := !maps.Equal(kinds, l.kinds), !maps.Equal(queues, l.queues)
	l.kinds, l.queues, l.applied = kinds, queues, applied
	p := l.producer
	l.mu.Unlock()

	// The fetch loop learns first: a log line says the change is in force.
	if p != nil && kindsChanged {
		p.SetLimits(kinds)
	}
	if p != nil && queuesChanged {
		p.SetQueueConcurrency(queues)
	}
	l.logChanges(ctx, first, prevApplied, applied)
}

// logChanges logs each override that applies now and did not before (at
// Start, each that applies), changed, or no longer applies.
func (l *runtimeLimits) logChanges(ctx context.Context, first bool, before, now map[limitTarget]twicetype.LimitOverride) {
	for t, o := range now {
		if old, ok := before[t]; ok && old.LimitSetting == o.LimitSetting {
			continue
		}
		msg := "limit override applied: new starts follow it"
		if first {
			msg = "limit override in force"
		}
		l.logger.InfoContext(ctx, msg, string(t.scope), t.name, "now", o.Text(t.scope),
			"compiled", l.compiledText(t), "by", o.By, "reason", o.Reason, "set_at", o.At)
	}
	for t, o := range before {
		if _, ok := now[t]; !ok {
			l.logger.InfoContext(ctx, "limit override removed: back to the compiled value", string(t.scope), t.name,
				"now", l.compiledText(t), "was", o.Text(t.scope))
		}
	}
}

// compiledText is the compiled value an override of t replaces, in words.
func (l *runtimeLimits) compiledText(t limitTarget) string {
	var s twicetype.LimitSetting
	if t.scope == twicetype.LimitScopeQueue {
		for _, q := range l.cfg.Queues {
			if q.Name == t.name {
				s.Concurrency = q.Concurrency
			}
		}
	} else if e := l.registry.lookup(t.name); e != nil {
		s.Limit = e.opts.storeLimit()
	}
	return s.Text(t.scope)
}

// attach makes p the fetch loop told of changes, and tells it the values
// in force now: p was built with the compiled ones.
func (l *runtimeLimits) attach(p *producer.Producer) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.producer = p
	p.SetLimits(l.kinds)
	p.SetQueueConcurrency(l.queues)
}

// concurrencyLimited reports whether kind has a concurrency limit (global
// or per key) now: a finished job of it frees a slot.
func (l *runtimeLimits) concurrencyLimited(kind string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	kl := l.kinds[kind]
	return kl.Global > 0 || kl.PerKey > 0
}
