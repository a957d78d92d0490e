// Package cluster makes the hourglass processes sharing one database one
// system: each node registers itself, and the work that must happen once
// (an order's deadline, its broker publish, its webhook deliveries, and the
// cluster-wide chores) is divided into hourglass.Partitions partitions
// leased in the database (hourglass.ClusterStore). The database is the only
// coordinator and its clock the only clock: a lease expires LeaseTTL after
// its last renewal by the database's clock, whatever the nodes' clocks say.
//
// Each node runs one loop (Run), every Tick (LeaseTTL/10, at most TickMax):
//
//  1. renew the leases it holds (a compare-and-set on owner and epoch); a
//     lease it could not renew is lost: its work stops at once;
//  2. heartbeat: refresh its node row and read the database's clock, which
//     gives the node's clock offset (Clock corrects for it);
//  3. read every lease and the live nodes, and compute each live node's fair
//     share (Partitions / nodes, the first nodes by id one more);
//  4. below its share, take free leases (never owned, released, or expired)
//     and then, from nodes above their share, their surplus (a rebalance).
//     The old owner of a partition taken in a rebalance learns of it at its
//     next renewal, within a Tick; the new owner starts working it only
//     after HandoverDelay, so the two do not send its webhooks or close its
//     orders at once (were they to, the store's compare-and-sets make the
//     second close a counted no-op).
//
// A node that stops renewing (a crash, a partition from the database, a
// long pause) keeps nothing after the TTL: the others take its partitions
// over at their next Tick and load their window. Run's end (SIGTERM)
// releases every lease at once, so the others take them within a Tick.
//
// Leases hold by time, not by replies. Every call to the database carries
// a deadline (CallTimeout), and a node works its partitions only until
// its leases would expire by its own monotonic clock, counted from before
// its last successful renewal was sent: valid = t0 + LeaseTTL - margin
// (LeaseTTL/10), where t0 is read before the renewal is sent. The database
// sets the expiry to its now + LeaseTTL, and its now is later than t0, so
// the database's lease outlives the node's belief by at least the margin
// (less the clocks' rate difference over one TTL, parts per million). At
// valid, a timer of Run's revokes every partition (OnChange reports them
// lost; Owned and Leader answer none and false from that instant, even
// before the timer has run), whether or not a renewal is still waiting for
// an answer: a node whose connection hangs stops before any other node can
// take its leases. A renewal that succeeds after that gives the leases
// back, as partitions taken in a rebalance (after HandoverDelay).
//
// Listeners (the engine, webhook delivery) learn of partitions gained and
// lost through OnChange; Owned and Leader answer at any time.
//
// What fences what. A lease is not a lock on the work: a node may act on a
// partition a moment after it lost it (a call in flight, a pause). So each
// effect is guarded where it lands:
//
//   - Closes, pays, cancels and timer fires are compare-and-sets on the row
//     (status pending, deadline passed by the database's clock), so two
//     nodes closing one order make one close and one counted no-op: exactly
//     once whatever the leases do. The leases only keep the work from being
//     done twice, not its effect.
//   - A webhook delivery is at least once by contract (receivers drop a
//     repeated event id). Its attempt is recorded by a compare-and-set on
//     (state pending, attempts), so two senders count one attempt. A node
//     checks that it owns the order's partition after reading the delivery
//     and just before sending, and stops owning it at its local validity,
//     before the database lets another node take the lease: a second send
//     by an old and a new owner needs an attempt already past that check
//     when the lease ran out (sent, its record lost), which a fencing token
//     in the database could not stop either (the receiver is the effect,
//     and it does not check tokens). So deliveries carry none.
//   - Alert notifications and the cluster's chores run on Leader, which
//     answers false from the local validity's end: two leaders overlap only
//     by a notification in flight. Pruning deletes by age and is idempotent,
//     so an overlap costs a second DELETE, nothing else.
//
// The local validity holds while the node's clock and the database's run at
// the same rate (within SafetyMargin over a TTL) and the leases are timed by
// one database clock (on Galera, the database nodes' clocks must agree: a
// node whose server's clock is ahead of another's works nothing, skew.go).
package cluster

import (
	"cmp"
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hourglass/hourglass"
)

// Defaults of Config.
const (
	LeaseTTLDefault = 5 * time.Second
	// LeaseTTLMin and LeaseTTLMax bound Config.LeaseTTL.
	LeaseTTLMin = 500 * time.Millisecond
	LeaseTTLMax = 5 * time.Minute
	// TickMax bounds the loop's interval: the partitions a node releases
	// (SIGTERM) are taken by the others at their next tick.
	TickMax = 250 * time.Millisecond
	// offsetSamples is how many heartbeats the clock offset is taken over.
	offsetSamples = 8
	// leaveTimeout bounds the release of leases on the way out.
	leaveTimeout = 3 * time.Second
)

// CallTimeout returns the deadline of each membership call to the database
// for a lease TTL: a third of it, so a hung call (a half-open connection,
// a stalled proxy) gives way to the next tick's, on another connection,
// well before the leases lapse.
func CallTimeout(ttl time.Duration) time.Duration { return ttl / 3 }

// SafetyMargin returns how long before its lease's expiry, counted by its
// own clock from before the renewal was sent, a node stops working the
// partition: a tenth of the TTL. It covers the database's clock being read
// in whole milliseconds, the two clocks' rate difference over one TTL, and
// the revocation's own latency.
func SafetyMargin(ttl time.Duration) time.Duration { return ttl / 10 }

// HandoverDelay returns how long a node waits before working a partition
// it took from a live node in a rebalance: a Tick and a half, by which the
// old owner's renewal has told it to stop.
func HandoverDelay(tick time.Duration) time.Duration { return tick * 3 / 2 }

// Observer receives what the membership does, for metrics. Its methods are
// called from Run's goroutine.
type Observer interface {
	// Owned is called with the number of partitions this node holds after
	// each change.
	Owned(n int)
	// Takeover is called once per partition taken from another node (its
	// lease expired, or a rebalance took it).
	Takeover()
	// Nodes is called with the number of live nodes after each tick.
	Nodes(n int)
}

type nopObserver struct{}

func (nopObserver) Owned(int) {}
func (nopObserver) Takeover() {}
func (nopObserver) Nodes(int) {}

// Config configures a Membership; zero values mean the defaults.
type Config struct {
	// NodeID names this node (default: DefaultNodeID()). At most 200
	// characters.
	NodeID string
	// Addr is the address the node's API listens on, shown to the others.
	Addr string
	// LeaseTTL is how long a lease lasts without renewal (default 5 s).
	LeaseTTL time.Duration
	// MaxClockSkew is how far the clock of the database server a node
	// reaches may run ahead of another server's (Galera) before the node
	// stops working partitions (default 100ms; see Fenced). Every node of a
	// cluster must have the same.
	MaxClockSkew time.Duration
	// Clock is the node's own clock (default the system clock); it also
	// times the loop's ticks and the revocation timer.
	Clock    hourglass.Clock
	Logger   *slog.Logger
	Observer Observer
}

// Validate reports a configuration error, naming the field and its range.
func (c Config) Validate() error {
	if c.LeaseTTL != 0 && (c.LeaseTTL < LeaseTTLMin || c.LeaseTTL > LeaseTTLMax) {
		return fmt.Errorf("cluster: lease TTL must be between %s and %s, got %s", LeaseTTLMin, LeaseTTLMax, c.LeaseTTL)
	}
	if c.MaxClockSkew < 0 {
		return fmt.Errorf("cluster: max clock skew must be at least 0, got %s", c.MaxClockSkew)
	}
	if len(c.NodeID) > 200 || strings.ContainsFunc(c.NodeID, func(r rune) bool { return r < 0x21 || r > 0x7e }) {
		return fmt.Errorf("cluster: node id must be at most 200 printable ASCII characters without spaces, got %q", c.NodeID)
	}
	return nil
}

// DefaultNodeID returns the host name and a random suffix: unique per
// process.
func DefaultNodeID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "node"
	}
	if len(host) > 180 {
		host = host[:180]
	}
	return host + "-" + strings.ToLower(rand.Text()[:8])
}

// change is a change of the partitions this node owns.
type change struct {
	Gained, Lost []int
}

// Membership is this node's part in the cluster. Its methods are safe for
// concurrent use; Run is called once.
type Membership struct {
	store hourglass.ClusterStore
	cfg   Config
	tick  time.Duration
	clock hourglass.TimerClock
	log   *slog.Logger
	obs   Observer

	// notifyMu orders the calls of the watchers: OnChange is told by Run's
	// goroutine and by the revocation timer's, and each watcher reads Owned
	// when told, so the last one told reads the latest set.
	notifyMu sync.Mutex

	mu     sync.Mutex
	leases map[int]hourglass.Lease // held, by partition
	// waiting holds the partitions taken in a rebalance and not worked yet,
	// with when to start (see HandoverDelay); Owned leaves them out.
	waiting map[int]time.Time
	// validUntil is when, by this node's own clock, the held leases stop
	// being worked: the send time of the last successful renewal (or of the
	// first acquisition) + LeaseTTL - SafetyMargin.
	validUntil time.Time
	startedAt  time.Time       // the database's, from the first heartbeat
	offsets    []time.Duration // recent lower bounds of the database's clock minus ours
	offset     time.Duration
	watchers   []func(gained, lost []int)
	last       hourglass.ClusterState
	fenced     bool // its database server's clock is ahead (skew.go)
}

// New returns a membership over store. It does nothing until Run.
func New(store hourglass.ClusterStore, cfg Config) (*Membership, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.NodeID = cmp.Or(cfg.NodeID, DefaultNodeID())
	cfg.LeaseTTL = cmp.Or(cfg.LeaseTTL, LeaseTTLDefault)
	cfg.MaxClockSkew = cmp.Or(cfg.MaxClockSkew, MaxClockSkewDefault)
	m := &Membership{store: store, cfg: cfg, tick: min(cfg.LeaseTTL/10, TickMax), clock: hourglass.WithTimers(cfg.Clock), log: cfg.Logger, obs: cfg.Observer, leases: map[int]hourglass.Lease{}, waiting: map[int]time.Time{}}
	if m.log == nil {
		m.log = slog.Default()
	}
	if m.obs == nil {
		m.obs = nopObserver{}
	}
	return m, nil
}

// NodeID returns this node's id.
func (m *Membership) NodeID() string { return m.cfg.NodeID }

// OnChange registers fn to be called with every change of the partitions
// this node owns, in order, from Run's goroutine, after Owned reflects it.
// fn must not block (hand the work to another goroutine).
func (m *Membership) OnChange(fn func(gained, lost []int)) {
	m.mu.Lock()
	m.watchers = append(m.watchers, fn)
	m.mu.Unlock()
}

// Owned returns the partitions this node holds now, ascending (empty, not
// nil, when it holds none).
func (m *Membership) Owned() hourglass.Parts {
	now := m.clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.validLocked(now) {
		return hourglass.Parts{}
	}
	return m.ownedLocked()
}

// validLocked reports whether the held leases may be worked at now (own
// clock): the revocation timer may not have run yet.
func (m *Membership) validLocked(now time.Time) bool {
	return now.Before(m.validUntil)
}

func (m *Membership) ownedLocked() hourglass.Parts {
	out := make(hourglass.Parts, 0, len(m.leases))
	for p := range m.leases {
		if _, wait := m.waiting[p]; !wait {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// Leader reports whether this node owns partition 0, whose owner does the
// chores that must run once for the cluster (alert notifications, event
// pruning).
func (m *Membership) Leader() bool {
	now := m.clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.leases[0]
	_, wait := m.waiting[0]
	return ok && !wait && m.validLocked(now)
}

// Offset returns the measured offset of the database's clock from this
// node's (positive: the database is ahead).
func (m *Membership) Offset() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.offset
}

// Clock returns this node's clock corrected by the measured offset, so that
// timers fire by the database's clock. The correction errs late, never
// early: each sample is the database's now minus our clock when its answer
// arrived, a lower bound of the true offset, and the largest of the recent
// ones is used. Its timers are the node's clock's (a duration is the same
// on both).
func (m *Membership) Clock() hourglass.TimerClock { return correctedClock{m.clock, m} }

type correctedClock struct {
	hourglass.TimerClock // the node's: its timers
	m                    *Membership
}

func (c correctedClock) Now() time.Time { return c.TimerClock.Now().Add(c.m.Offset()) }

// Join makes the first heartbeat (so the clock offset is known before
// anything is scheduled). Run calls it if it was not called.
func (m *Membership) Join(ctx context.Context) error {
	return m.heartbeat(ctx)
}

// call returns ctx bounded by CallTimeout: every membership call to the
// database has a deadline.
func (m *Membership) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, CallTimeout(m.cfg.LeaseTTL))
}

func (m *Membership) heartbeat(ctx context.Context) error {
	m.mu.Lock()
	n := hourglass.Node{ID: m.cfg.NodeID, Addr: m.cfg.Addr, StartedAt: m.startedAt,
		ClockOffset: m.offset, OffsetKnown: len(m.offsets) > 0} // published for ClockSkewOf
	m.mu.Unlock()
	ctx, cancel := m.call(ctx)
	defer cancel()
	dbNow, err := m.store.Heartbeat(ctx, n)
	arrived := m.clock.Now()
	if err != nil {
		return fmt.Errorf("cluster: heartbeat: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.startedAt.IsZero() {
		m.startedAt = dbNow
	}
	// The database read its clock before its answer arrived: dbNow -
	// arrived is at most the true offset. The database's clock is in whole
	// milliseconds, so a millisecond more is taken off.
	m.offsets = append(m.offsets, dbNow.Sub(arrived)-time.Millisecond)
	if len(m.offsets) > offsetSamples {
		m.offsets = m.offsets[1:]
	}
	m.offset = slices.Max(m.offsets)
	return nil
}

// Run takes part in the cluster until ctx ends, then releases every lease
// and leaves, and returns nil. Errors of the database are logged and
// retried at the next tick; leases not renewed within the TTL (by this
// node's clock) are given up locally.
func (m *Membership) Run(ctx context.Context) error {
	if m.startedAt.IsZero() {
		if err := m.heartbeat(ctx); err != nil && ctx.Err() == nil {
			m.log.Warn("cluster: first heartbeat failed; retrying", "err", err)
		}
	}
	revoking := make(chan struct{})
	stopRevoking := make(chan struct{})
	go func() { defer close(revoking); m.revokeLoop(stopRevoking) }()
	defer func() { close(stopRevoking); <-revoking }()
	t := m.clock.NewTicker(m.tick)
	defer t.Stop()
	for {
		if err := m.step(ctx); err != nil && ctx.Err() == nil {
			m.log.Warn("cluster: membership step failed; retrying at the next tick", "node", m.cfg.NodeID, "err", err)
		}
		select {
		case <-ctx.Done():
			m.leave()
			return nil
		case <-t.C():
		}
	}
}

// revokeLoop revokes the held leases at validUntil, whatever Run's
// goroutine is doing (a call may hang until its deadline). Its timer is
// armed for the time left by the node's clock, at most a Tick, and checks
// the clock again when it fires, so a clock that jumps (a test's) is
// followed within a Tick.
func (m *Membership) revokeLoop(stop <-chan struct{}) {
	for {
		wait := m.tick
		now := m.clock.Now()
		m.mu.Lock()
		if len(m.leases) > 0 {
			wait = min(wait, m.validUntil.Sub(now))
		}
		m.mu.Unlock()
		if wait <= 0 {
			m.revokeIfExpired()
			continue
		}
		t := m.clock.NewTimer(wait)
		select {
		case <-stop:
			t.Stop()
			return
		case <-t.C():
		}
		m.revokeIfExpired()
	}
}

// revokeIfExpired gives up every held lease when their validity (by this
// node's clock) has passed: the others may take them from then on.
func (m *Membership) revokeIfExpired() {
	now := m.clock.Now()
	m.mu.Lock()
	if len(m.leases) == 0 || m.validLocked(now) {
		m.mu.Unlock()
		return
	}
	lost := m.ownedLocked()
	held := len(m.leases)
	m.leases = map[int]hourglass.Lease{}
	clear(m.waiting)
	late := now.Sub(m.validUntil)
	m.mu.Unlock()
	m.log.Error("cluster: no lease renewal succeeded in time; stopped working every partition before the leases expire",
		"node", m.cfg.NodeID, "partitions", held, "ttl", m.cfg.LeaseTTL, "revoked_late_by", late)
	m.changed(change{Lost: lost})
}

// leave gives every lease up locally, then in the database, and removes the
// node's row, so the others take the partitions at their next tick.
func (m *Membership) leave() {
	m.mu.Lock()
	lost := m.ownedLocked()
	m.leases = map[int]hourglass.Lease{}
	clear(m.waiting)
	m.mu.Unlock()
	m.notify(change{Lost: lost})
	ctx, cancel := context.WithTimeout(context.Background(), leaveTimeout)
	defer cancel()
	if err := m.store.LeaveCluster(ctx, m.cfg.NodeID); err != nil {
		m.log.Warn("cluster: leaving failed; the others take this node's partitions when its leases expire", "node", m.cfg.NodeID, "ttl", m.cfg.LeaseTTL, "err", err)
		return
	}
	m.log.Info("cluster: left; partitions released", "node", m.cfg.NodeID, "partitions", len(lost))
}

// step is one tick of the loop.
// The renewal goes first: a slow heartbeat must not delay it.
func (m *Membership) step(ctx context.Context) error {
	if err := m.renew(ctx); err != nil {
		return err
	}
	if err := m.heartbeat(ctx); err != nil {
		return err
	}
	m.startWaiting()
	st, err := m.clusterState(ctx)
	if err != nil {
		return fmt.Errorf("cluster: read state: %w", err)
	}
	m.mu.Lock()
	m.last = st
	m.mu.Unlock()
	m.obs.Nodes(len(st.Nodes))
	if o, ok := m.obs.(ClockSkewObserver); ok {
		o.DBClockSkew(ClockSkewOf(st.Nodes).Skew)
	}
	return m.balance(ctx, st)
}

// renew extends the held leases; those not renewed are lost. The time read
// before the renewal is sent, plus LeaseTTL - SafetyMargin, is how long the
// renewed leases are worked (revokeLoop); a failed renewal extends nothing.
func (m *Membership) renew(ctx context.Context) error {
	m.mu.Lock()
	held := make([]hourglass.Lease, 0, len(m.leases))
	for _, l := range m.leases {
		held = append(held, l)
	}
	m.mu.Unlock()
	if len(held) == 0 {
		return nil
	}
	sent := m.clock.Now()
	cctx, cancel := m.call(ctx)
	renewed, err := m.store.RenewLeases(cctx, m.cfg.NodeID, held, m.cfg.LeaseTTL)
	cancel()
	if err != nil {
		m.revokeIfExpired()
		return fmt.Errorf("cluster: renew: %w", err)
	}
	keep := make(map[int]hourglass.Lease, len(renewed))
	for _, l := range renewed {
		keep[l.Part] = l
	}
	valid := sent.Add(m.cfg.LeaseTTL - SafetyMargin(m.cfg.LeaseTTL))
	now := m.clock.Now()
	var lost, back []int
	m.mu.Lock()
	for _, l := range held {
		if _, ok := keep[l.Part]; !ok {
			if _, had := m.leases[l.Part]; had {
				if _, wait := m.waiting[l.Part]; !wait { // it was worked: tell
					lost = append(lost, l.Part)
				}
			}
			delete(m.leases, l.Part)
			delete(m.waiting, l.Part)
		}
	}
	revoked := len(m.leases) == 0 // by revokeIfExpired while the call was out
	for p, l := range keep {
		if _, ok := m.leases[p]; ok {
			m.leases[p] = l
		} else if revoked && now.Before(valid) {
			// Revoked locally, renewed in the database: held again, and
			// worked after a handover delay like a partition taken from a
			// live node (watchers were told it was lost).
			m.leases[p] = l
			m.waiting[p] = now.Add(HandoverDelay(m.tick))
			back = append(back, p)
		}
	}
	if len(m.leases) > 0 {
		m.validUntil = valid
	}
	m.mu.Unlock()
	if len(back) > 0 {
		slices.Sort(back)
		m.log.Info("cluster: leases renewed after they were given up locally; working them again after a handover delay", "node", m.cfg.NodeID, "partitions", back)
	}
	if len(lost) > 0 {
		slices.Sort(lost)
		m.log.Info("cluster: partitions lost to another node", "node", m.cfg.NodeID, "partitions", lost)
		m.changed(change{Lost: lost})
	}
	return nil
}

// Shares returns each live node's fair share of the partitions, by id:
// Partitions / len(nodes), and one more for the first Partitions % n
// nodes in id order.
func Shares(nodes []hourglass.Node) map[string]int {
	ids := make([]string, len(nodes))
	for i, n := range nodes {
		ids[i] = n.ID
	}
	slices.Sort(ids)
	out := make(map[string]int, len(ids))
	for i, id := range ids {
		out[id] = hourglass.Partitions / len(ids)
		if i < hourglass.Partitions%len(ids) {
			out[id]++
		}
	}
	return out
}

// roomToAcquire reports whether a step may ask for one more lease at now:
// while nothing is held, or while what is held stays valid for more than
// half a TTL. Each lease is a call of its own, and the held leases are
// renewed only at the next step: on a slow database, a whole share taken
// in one step outlasted the held leases' validity, so they lapsed before
// that renewal, were given up, and were taken again at the next step, over
// and over (a node on a loaded Galera node gave up 12 to 53 partitions at
// a time, 16 times in 15 s; orders closed up to 16 s late). A step takes
// at least one lease, so a node whose calls are slow still gains its
// share, a lease or more per step.
func (m *Membership) roomToAcquire(now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.leases) == 0 || m.validUntil.Sub(now) > m.cfg.LeaseTTL/2
}

// balance takes this node's share: free leases first, then the surplus of
// nodes above their share.
func (m *Membership) balance(ctx context.Context, st hourglass.ClusterState) error {
	self := m.cfg.NodeID
	// The nodes whose database server's clock is ahead work nothing (they
	// would close orders early): they take no share, and hand theirs over.
	ahead := aheadNodes(st.Nodes, m.cfg.MaxClockSkew)
	if m.fence(ctx, ahead[self]) {
		return nil
	}
	live := slices.DeleteFunc(slices.Clone(st.Nodes), func(n hourglass.Node) bool { return ahead[n.ID] })
	if !slices.ContainsFunc(live, func(n hourglass.Node) bool { return n.ID == self }) {
		live = append(slices.Clone(live), hourglass.Node{ID: self})
	}
	shares := Shares(live)
	m.mu.Lock()
	need := shares[self] - len(m.leases)
	m.mu.Unlock()
	if need <= 0 {
		return nil
	}
	held := map[string][]hourglass.Lease{} // live owners' unexpired leases
	var free []hourglass.Lease
	for _, l := range st.Leases {
		switch {
		case l.Owner == "" || !l.Expires.After(st.Now):
			free = append(free, l)
		case l.Owner != self:
			held[l.Owner] = append(held[l.Owner], l)
		}
	}
	var candidates []candidate
	for _, l := range free {
		candidates = append(candidates, candidate{l, false})
	}
	// The surplus of each node above its share (a node no longer live
	// has share 0: its leases are taken as they expire, not stolen), its
	// highest partitions first, so that nodes taking at once contend for
	// the same ones and the compare-and-set settles it.
	owners := make([]string, 0, len(held))
	for o := range held {
		owners = append(owners, o)
	}
	slices.Sort(owners)
	for _, o := range owners {
		share, alive := shares[o]
		if !alive {
			continue
		}
		ls := held[o]
		slices.SortFunc(ls, func(a, b hourglass.Lease) int { return b.Part - a.Part })
		for _, l := range ls[:max(len(ls)-share, 0)] {
			candidates = append(candidates, candidate{l, true})
		}
	}
	var gained []int
	var firstErr error
	for i, c := range candidates {
		if need == 0 || ctx.Err() != nil {
			break
		}
		asked := m.clock.Now()
		if i > 0 && !m.roomToAcquire(asked) {
			break // the next step renews first, then takes more
		}
		cctx, cancel := m.call(ctx)
		l, ok, err := m.store.AcquireLease(cctx, self, c.lease, c.steal, m.cfg.LeaseTTL)
		cancel()
		if err != nil {
			firstErr = cmp.Or(firstErr, fmt.Errorf("cluster: acquire partition %d: %w", c.lease.Part, err))
			break
		}
		if !ok {
			continue // another node was faster: the next tick sees it
		}
		if c.lease.Owner != "" && c.lease.Owner != self {
			m.obs.Takeover()
		}
		m.mu.Lock()
		if len(m.leases) == 0 {
			// The first lease held is worked for a TTL (less the margin)
			// from before it was asked for. A later one lasts at least as
			// long as those held, and shares their validity until the next
			// renewal covers it: one validity for all errs early.
			m.validUntil = asked.Add(m.cfg.LeaseTTL - SafetyMargin(m.cfg.LeaseTTL))
		}
		m.leases[l.Part] = l
		if c.steal {
			m.waiting[l.Part] = m.clock.Now().Add(HandoverDelay(m.tick))
		}
		m.mu.Unlock()
		if !c.steal {
			gained = append(gained, l.Part)
		}
		need--
	}
	if len(gained) > 0 {
		slices.Sort(gained)
		m.log.Info("cluster: partitions taken", "node", self, "partitions", gained)
		m.changed(change{Gained: gained})
	}
	return firstErr
}

// startWaiting starts working the partitions taken in a rebalance whose
// handover delay has passed.
func (m *Membership) startWaiting() {
	now := m.clock.Now()
	var gained []int
	m.mu.Lock()
	for p, at := range m.waiting {
		if !now.Before(at) {
			delete(m.waiting, p)
			gained = append(gained, p)
		}
	}
	m.mu.Unlock()
	if len(gained) > 0 {
		slices.Sort(gained)
		m.log.Info("cluster: partitions handed over", "node", m.cfg.NodeID, "partitions", gained)
		m.changed(change{Gained: gained})
	}
}

type candidate struct {
	lease hourglass.Lease
	steal bool
}

// changed reports a change to the observer and the watchers.
func (m *Membership) changed(c change) {
	m.mu.Lock()
	n := len(m.leases)
	m.mu.Unlock()
	m.obs.Owned(n)
	m.notify(c)
}

func (m *Membership) notify(c change) {
	if len(c.Gained) == 0 && len(c.Lost) == 0 {
		return
	}
	m.notifyMu.Lock()
	defer m.notifyMu.Unlock()
	m.mu.Lock()
	ws := slices.Clone(m.watchers)
	m.mu.Unlock()
	for _, w := range ws {
		w(c.Gained, c.Lost)
	}
}

// View returns the cluster as GET /v1/cluster shows it: the live nodes
// (from a fresh read of the database) with the partitions each holds.
func (m *Membership) View(ctx context.Context) (hourglass.ClusterView, error) {
	st, err := m.clusterState(ctx)
	if err != nil {
		return hourglass.ClusterView{}, fmt.Errorf("cluster: read state: %w", err)
	}
	return viewOf(st, m.cfg.NodeID), nil
}

// clusterState reads the cluster's state within CallTimeout. The live
// nodes are those seen within LeaseTTL, their heartbeats' times compared
// across database servers on the nodes' own clocks (liveNodes), so that
// the rows are read SkewWindow further back.
func (m *Membership) clusterState(ctx context.Context) (hourglass.ClusterState, error) {
	ctx, cancel := m.call(ctx)
	defer cancel()
	st, err := m.store.ClusterState(ctx, m.cfg.LeaseTTL+SkewWindow)
	if err != nil {
		return st, err
	}
	m.mu.Lock()
	offset, known := m.offset, len(m.offsets) > 0
	m.mu.Unlock()
	st.Nodes = liveNodes(st, m.cfg.NodeID, offset, known, m.cfg.LeaseTTL)
	return st, nil
}

func viewOf(st hourglass.ClusterState, self string) hourglass.ClusterView {
	v := hourglass.ClusterView{Partitions: hourglass.Partitions}
	for _, n := range st.Nodes {
		nv := hourglass.NodeView{Node: n, Partitions: []int{}, Self: n.ID == self}
		for _, l := range st.Leases {
			if l.Owner == n.ID && l.Expires.After(st.Now) {
				nv.Partitions = append(nv.Partitions, l.Part)
			}
		}
		v.Nodes = append(v.Nodes, nv)
	}
	return v
}

// Single is the cluster of a store that cannot be shared (SQLite): this
// process owns every partition and is the leader.
type Single struct {
	ID        string
	Addr      string
	StartedAt time.Time
	Clock     hourglass.Clock // gives last_seen
}

// View returns the one node, owning every partition.
func (s Single) View(context.Context) (hourglass.ClusterView, error) {
	all := make([]int, hourglass.Partitions)
	for i := range all {
		all[i] = i
	}
	var now time.Time
	if s.Clock != nil {
		now = s.Clock.Now()
	}
	return hourglass.ClusterView{Partitions: hourglass.Partitions, Nodes: []hourglass.NodeView{{
		Node:       hourglass.Node{ID: s.ID, Addr: s.Addr, StartedAt: s.StartedAt, LastSeen: now},
		Partitions: all,
		Self:       true,
	}}}, nil
}
