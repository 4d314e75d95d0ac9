// Package twice is a durable background-job system whose one rule is that
// every handler will run at least twice, possibly concurrently on two nodes,
// and must converge.
//
// Producers define versioned job kinds as small structs of IDs (Args) and
// enqueue them, also inside their own database transaction (EnqueueTx).
// Workers register a Handler per kind with an effect Strategy; the runtime,
// not the handler, applies the idempotency marker around the handler, so a
// second delivery of the same message converges:
//
//   - ClaimAfter (the default): duplicates over loss, for emails;
//   - ClaimBefore: loss over duplicates, for charges without a provider key;
//   - Transactional: exactly once, for effects in the same database;
//   - None: the effect is idempotent by key.
//
// Delivery is at least once: a fetched job holds a lease that a heartbeat
// extends, and every outcome is written under a fencing epoch, so a worker
// whose lease was lost can never overwrite the outcome of the worker that
// took the job over.
//
// Every kind has a kill switch the runtime checks before every attempt
// (KindOpts.FailClosed for kinds that must stay off unless switched on; a
// TOML file and the store as sources, reloaded without a restart), and
// Registry.Schedule adds recurring jobs whose every tick becomes one job
// however many nodes run the scheduler.
//
// Operators act through the Client's admin API (JobCancel, QueuePause,
// ToggleSet, ScheduleTrigger, Catalog and the rest, in admin*.go), which
// the twice CLI and the dashboard are built on; a Client made by NewClient
// serves it without Start. Errors the caller's input caused wrap
// ErrInvalidInput.
package twice
