package postgres

import (
	"context"
	"sync"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/jackc/pgx/v5"
)

// A node alone in its cluster announces its creates to nobody: the only
// listener of the created-orders channel is its own, which drops its own
// notices. Yet a NOTIFY costs the server about a sixth of a batch of creates
// (the pg_notify, the queue's lock and write at commit, and the listening
// backend woken to read it: BenchmarkAnnounceCost,
// docs/benchmarks/postgres-speed.md). So while the cluster's own reads say
// this store value's node is alone, the group commit holds a batch's
// announcement back instead of sending it, and the next read decides:
//
//   - still alone: the announcements of the batches that had committed
//     before the read began are dropped. A node that takes a partition
//     (AcquireLease) loads its window after taking it; a take that the read
//     did not see came after the read began, so that node's load reads
//     those batches' orders from the database.
//   - not alone (another live node, or a lease another node holds): every
//     announcement held is sent at once, late, and batches announce again
//     at their commit. A node that took a partition before the read began
//     has listened since it opened its store, and reads the announced
//     orders' deadlines from the database (WatchCreated).
//
// "Alone" is a fact only the cluster's reads establish: ClusterState (below,
// every cluster tick) with the node's id learnt from its Heartbeat through
// this store value. A store value that no node's cluster loop reads through
// (a test's, a command's, a cluster of nodes sharing one store value)
// announces every batch, as before. An answer is trusted for a quarter of
// the TTL: a node whose cluster loop stopped reading announces again well
// before its leases could expire and be taken. A batch whose commit failed
// holds nothing; one whose outcome is unknown counts as committed.

// quietNotices is a store value's announcements held while its node is
// alone. Safe for concurrent use.
type quietNotices struct {
	mu    sync.Mutex
	self  string // the node id heartbeated through this store value
	many  bool   // several node ids were: never alone
	alone bool   // the last read found this node alone
	until time.Time
	held  []string // payloads of committed batches, not sent
	// base is the number of payloads ever taken out of held: held[i] is
	// the base+i-th held since the store value opened.
	base int
}

// heartbeat records the node id that heartbeats through this store value.
func (q *quietNotices) heartbeat(id string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case q.self == "":
		q.self = id
	case q.self != id:
		q.many, q.alone = true, false
	}
}

// mark returns the count of payloads held so far: those are of batches
// that committed before a read that begins now.
func (q *quietNotices) mark() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.base + len(q.held)
}

// observe takes a cluster read that began after mark and answered st at
// now (real time); it returns the payloads to send now, late.
func (q *quietNotices) observe(st hourglass.ClusterState, ttl time.Duration, mark int, now time.Time) []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.aloneIn(st) {
		// A read that began before another's answer came (the API's
		// cluster view beside the cluster loop) may mark fewer.
		drop := max(0, min(mark-q.base, len(q.held)))
		q.held = q.held[drop:]
		q.base += drop
		q.alone, q.until = true, now.Add(ttl/4)
		return nil
	}
	q.alone = false
	return q.takeAll()
}

// aloneIn reports whether st shows this store value's node as the only
// live node and the only owner of a lease.
func (q *quietNotices) aloneIn(st hourglass.ClusterState) bool {
	if q.self == "" || q.many {
		return false
	}
	for _, n := range st.Nodes {
		if n.ID != q.self {
			return false
		}
	}
	for _, l := range st.Leases {
		if l.Owner != "" && l.Owner != q.self {
			return false
		}
	}
	return true
}

// leave ends the quiet: the node is leaving, the others take its
// partitions. It returns the payloads to send.
func (q *quietNotices) leave() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.alone = false
	return q.takeAll()
}

func (q *quietNotices) takeAll() []string {
	out := q.held
	q.base += len(out)
	q.held = nil
	return out
}

// holds reports whether a batch deciding at now may hold its announcement.
func (q *quietNotices) holds(now time.Time) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.alone && now.Before(q.until)
}

// committed takes the held payloads of a batch that committed; it returns
// them back when the node is no longer alone: send them now.
func (q *quietNotices) committed(payloads []string) []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.alone {
		return payloads
	}
	q.held = append(q.held, payloads...)
	return nil
}

// unsent holds payloads for the next cluster read to send (or drop, if it
// finds the node alone): those of a late notification that failed, or of a
// batch whose COMMIT's outcome is unknown.
func (q *quietNotices) unsent(payloads []string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.held = append(q.held, payloads...)
}

// announceSQL sends a batch's payloads ($2) on the created-orders channel
// ($1), at its commit.
const announceSQL = `SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p`

// notifyLate sends payloads held back by the quiet, on q (a connection
// outside any transaction: each is sent when its statement ends). On
// failure they are held again, for the next cluster read.
func (s *Store) notifyLate(ctx context.Context, q sender, payloads []string) {
	if len(payloads) == 0 {
		return
	}
	b := &pgx.Batch{}
	b.Queue(announceSQL, s.createdChannel, payloads)
	if err := q.SendBatch(ctx, b).Close(); err != nil {
		s.quiet.unsent(payloads)
		s.log.Warn("postgres: the late announcement of created orders failed; the next cluster read sends it",
			"orders", len(payloads), "err", scrubErr(err, s.cfg.URL))
	}
}

// Heartbeat implements hourglass.ClusterStore (sqlq.Cluster's), and
// records the node's id for the quiet.
func (s *Store) Heartbeat(ctx context.Context, n hourglass.Node) (time.Time, error) {
	now, err := s.Cluster.Heartbeat(ctx, n)
	if err == nil {
		s.quiet.heartbeat(n.ID)
	}
	return now, err
}

// ClusterState implements hourglass.ClusterStore (sqlq.Cluster's), and
// decides the quiet from what it read: see above.
func (s *Store) ClusterState(ctx context.Context, ttl time.Duration) (hourglass.ClusterState, error) {
	mark := s.quiet.mark()
	st, err := s.Cluster.ClusterState(ctx, ttl)
	if err != nil {
		return st, err
	}
	if late := s.quiet.observe(st, ttl, mark, realNow()); len(late) > 0 {
		s.notifyLate(ctx, s.pool, late)
	}
	return st, nil
}

// LeaveCluster implements hourglass.ClusterStore (sqlq.Cluster's); held
// announcements are sent first.
func (s *Store) LeaveCluster(ctx context.Context, nodeID string) error {
	s.notifyLate(ctx, s.pool, s.quiet.leave())
	return s.Cluster.LeaveCluster(ctx, nodeID)
}

// realNow is the time the quiet's answer is trusted by: real time, like
// the cluster's validity, whatever clock the store was given.
func realNow() time.Time { return hourglass.SystemClock{}.Now() }
