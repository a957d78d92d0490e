// Package bisect is the fallback of the stores' group-commit writers when a
// batch fails: instead of running each of its writes alone (one transaction
// per write, a replay that a trickle of broken writes turns into a collapse
// of throughput), it splits the batch in halves and runs each half as one
// transaction, recursing into the halves that fail. It knows nothing of
// databases: a store gives it "run these writes as one transaction" and
// "may this error belong to one write". It imports only the standard
// library.
//
// Cost: a batch of n writes with one broken write takes at most
// 1 + 2·⌈log2 n⌉ transactions (the whole batch, then two halves per level
// down to the broken write alone); with k broken writes, at most about
// 1 + 2·k·⌈log2 n⌉. Every write that does not fail in its own transaction
// commits and keeps its own answer.
package bisect

// Run commits writes 0..n-1 of a batch: commit(lo, hi) must run writes
// lo..hi-1 as one transaction and return nil when it committed (each write's
// answer set, domain refusals included), or the error that rolled it back.
// When commit fails, isolate(err) says whether the failure may be one
// write's own (a statement the server refused) rather than the database's
// (unreachable, an outcome unknown): then the range is split in halves,
// each committed the same way, recursively. A range that fails and is not
// split, a single write or a failure isolate refuses, is handed to
// fail(lo, hi, err), which answers its writes with err.
//
// Run returns the error of the first transaction, the whole batch's (nil
// when it committed), and how many transactions it ran. The halves run one
// after another, in queue order, on the caller's goroutine; commit, isolate
// and fail are never called concurrently. Run does nothing when n <= 0.
func Run(n int, commit func(lo, hi int) error, isolate func(error) bool, fail func(lo, hi int, err error)) (first error, commits int) {
	if n <= 0 {
		return nil, 0
	}
	var run func(lo, hi int) error
	run = func(lo, hi int) error {
		commits++
		err := commit(lo, hi)
		if err == nil {
			return nil
		}
		if hi-lo == 1 || !isolate(err) {
			fail(lo, hi, err)
			return err
		}
		mid := lo + (hi-lo)/2
		run(lo, mid)
		run(mid, hi)
		return err
	}
	return run(0, n), commits
}
