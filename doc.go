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
package twice
