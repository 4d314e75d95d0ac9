// Package twicetest proves that a handler converges, the way net/http/httptest
// lets a test drive an http.Handler: it runs the handler exactly as it is
// registered in production, through the real twice runtime on a real store,
// and checks the user's effect counter against what the kind's strategy
// promises.
//
// RunTwice delivers one message in three scenarios, four for ClaimBefore:
//
//   - in a row: the message is delivered, completed, and delivered again
//     (same MessageID, so the same idempotency key), as after a lost
//     acknowledgement;
//   - concurrently: two workers (two Clients, each with its own store handle
//     on the same database) lease the same message at once, as on two nodes;
//   - crash after the effect: the first delivery dies after the handler
//     returned and before its outcome (and ClaimAfter's claim riding with
//     it, or Transactional's commit) is written; the lease expires, the
//     rescuer requeues the job and it is delivered again;
//   - crash between claim and effect (ClaimBefore only): the first delivery
//     writes its claim and dies before calling the handler, then is
//     delivered again;
//   - crash at step (handlers with named steps, twice.Step): one scenario
//     per boundary of every step the first scenario saw, in which the first
//     delivery dies there (ClaimBefore: before its claim, between claim and
//     effect, between effect and receipt, after the receipt; ClaimAfter:
//     before its effect, between effect and claim, after the claim;
//     Transactional: before its claim, before and after its commit) and
//     the redelivery must resume at the first unfinished step. The job
//     must complete with every step's effect once (a ClaimAfter step's
//     twice after a crash between its effect and its claim), or, when a
//     ClaimBefore step's claim was left unfinished, end dead-lettered with
//     no later step run. Case.StepEffects counts each step's effect; without
//     it only the job's outcome is judged.
//
// A handler that waits (twice.AwaitSignal, twice.Sleep) is answered in
// every scenario: each time a job of the message parks, RunTwice sends it
// the signal it waits for twice (Case.Signals), or fires its timer, and
// the scenario goes on until the job finishes; the promises are judged as
// for any handler, across the parks and the resumes.
//
// The strategy is not passed in: it is read from what the registration does
// on the store during the first delivery (a marker peek is ClaimAfter, a
// marker claim before the effect is ClaimBefore, a transaction is
// Transactional, no marker at all is None), and the report names it. The
// promises checked are:
//
//   - ClaimAfter: at least one effect in every scenario, exactly one in a
//     row, at most two concurrently (both copies may pass the peek before
//     either claims) and at most two after the crash (the effect happened,
//     its claim was lost);
//   - Transactional: exactly one effect in every scenario;
//   - ClaimBefore: at most one effect in every scenario; after either crash
//     the redelivery finds the dead delivery's claim and the job must end in
//     the dead-letter queue, for a person to check whether the effect
//     happened, rather than complete as a silent no-op;
//   - None: nothing guards the handler, so the effect itself must converge:
//     after every scenario Case.Effects must report exactly 1.
//
// Effects other than None's are counted as the change of Case.Effects over a
// scenario. Each scenario runs on a fresh SQLite database in t.TempDir()
// unless Case.Store is set; on a caller's store the scenarios share one
// database, so a marker written by an earlier scenario may rightly turn a
// later delivery into a no-op, and only the upper bounds are checked there.
package twicetest
