package nodes

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/hourglass/hourglass/internal/testenv"
)

// The chaos actions of a soak.
const (
	ActionKill  = "kill"  // SIGKILL, restarted 1–3 TTLs later
	ActionTerm  = "term"  // SIGTERM, restarted 1–3 TTLs later
	ActionPause = "pause" // SIGSTOP, SIGCONT 0.5–3 TTLs later
)

// Defaults of SoakConfig.
const (
	SoakNodesDefault    = 3
	SoakDurationDefault = time.Minute
	// SoakNewIDShareDefault is the share of restarts under a new node id
	// (a replacement process) rather than the old one.
	SoakNewIDShareDefault = 0.5
	// leaseTTLDefault is the binary's --lease-ttl default, for the soak's
	// timings when Config.LeaseTTL is 0.
	leaseTTLDefault = 5 * time.Second
)

// SoakConfig describes a chaos soak. Cluster's Binary, DatabaseURL (or
// DatabaseURLs: the verdict reads the first) and LogDir are required; the zero value of every other field is its default.
type SoakConfig struct {
	Cluster Config
	// Nodes is how many nodes run (SoakNodesDefault); at least one is
	// always left live.
	Nodes int
	// Duration is how long the chaos lasts (SoakDurationDefault); the load
	// then runs one more TTL with every node back, and the verdict waits
	// for the last deadline.
	Duration time.Duration
	Load     LoadConfig
	// Actions are the chaos actions to draw from (default all three).
	Actions []string
	// Gap is the mean time between two actions (default 2 × the TTL).
	Gap time.Duration
	// NewIDShare is the share of restarts under a new node id
	// (SoakNewIDShareDefault); -1 for none.
	NewIDShare float64
	// LateBound is the verdict's bound on close lateness (default the TTL
	// + 1 s: a dead or paused node's partitions are taken over once its
	// leases expire).
	LateBound time.Duration
	// Seed seeds the chaos (and the load unless Load.Seed is set); 0 takes
	// one from the clock.
	Seed uint64
}

func (c SoakConfig) withDefaults() SoakConfig {
	c.Nodes = cmp.Or(c.Nodes, SoakNodesDefault)
	c.Duration = cmp.Or(c.Duration, SoakDurationDefault)
	if len(c.Actions) == 0 {
		c.Actions = []string{ActionKill, ActionTerm, ActionPause}
	}
	ttl := c.ttl()
	c.Gap = cmp.Or(c.Gap, 2*ttl)
	switch c.NewIDShare {
	case 0:
		c.NewIDShare = SoakNewIDShareDefault
	case -1:
		c.NewIDShare = 0
	}
	c.LateBound = cmp.Or(c.LateBound, ttl+time.Second)
	c.Seed = cmp.Or(c.Seed, uint64(time.Now().UnixNano()))
	c.Load.Seed = cmp.Or(c.Load.Seed, c.Seed)
	return c
}

func (c SoakConfig) ttl() time.Duration { return cmp.Or(c.Cluster.LeaseTTL, leaseTTLDefault) }

// Validate returns an error naming the field out of range.
func (c SoakConfig) Validate() error {
	if err := c.Cluster.validate(); err != nil {
		return err
	}
	if err := c.Load.Validate(); err != nil {
		return err
	}
	c = c.withDefaults()
	switch {
	case c.Nodes < 2 || c.Nodes > 64:
		return fmt.Errorf("soak: Nodes must be 2..64, got %d", c.Nodes)
	case c.Duration < 0:
		return fmt.Errorf("soak: Duration must be >= 0, got %s", c.Duration)
	case c.Gap < 0:
		return fmt.Errorf("soak: Gap must be >= 0, got %s", c.Gap)
	case c.NewIDShare < 0 || c.NewIDShare > 1:
		return fmt.Errorf("soak: NewIDShare must be in [0, 1] (or -1), got %g", c.NewIDShare)
	}
	for _, a := range c.Actions {
		if a != ActionKill && a != ActionTerm && a != ActionPause {
			return fmt.Errorf("soak: unknown action %q (want kill, term or pause)", a)
		}
	}
	return nil
}

// SoakReport is what a soak did and found.
type SoakReport struct {
	Seed    uint64
	Verdict *Verdict
	// Actions counts the actions taken: kill, term, pause, restart, resume.
	Actions map[string]int
	// Takeovers are, per SIGKILL, the time from the signal to the first
	// /v1/cluster view in which every partition the node owned is owned
	// by a live node (to the 20 ms the view is polled at).
	Takeovers []time.Duration
	// Handovers are the same per SIGTERM.
	Handovers []time.Duration
	// KillLateness is, per measured SIGKILL, the latest close among the
	// orders of the killed node's partitions that fell due between the
	// kill and the takeover: the takeover as the orders saw it.
	KillLateness []time.Duration
	// Unmeasured notes the kills and terms whose takeover was not seen
	// (a binary without /v1/cluster, or not within the wait).
	Unmeasured []string
	// Metrics are the cluster metrics each node reported at the end.
	Metrics map[string]map[string]float64
}

// OK reports whether the verdict holds no problem and every takeover was
// measured.
func (r *SoakReport) OK() bool { return r.Verdict.OK() }

// Report prints the report.
func (r *SoakReport) Report() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d; actions %v\n", r.Seed, r.Actions)
	fmt.Fprintf(&b, "kill → takeover (%d SIGKILLs): %s\n", len(r.Takeovers), durationStats(r.Takeovers))
	fmt.Fprintf(&b, "kill → close lateness of its orders due before the takeover (%d SIGKILLs): %s\n", len(r.KillLateness), durationStats(r.KillLateness))
	fmt.Fprintf(&b, "term → handover (%d SIGTERMs): %s\n", len(r.Handovers), durationStats(r.Handovers))
	for _, u := range r.Unmeasured {
		fmt.Fprintf(&b, "  not measured: %s\n", u)
	}
	ids := make([]string, 0, len(r.Metrics))
	for id := range r.Metrics {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		m := r.Metrics[id]
		fmt.Fprintf(&b, "metrics of %s: partitions_owned %g, cluster_nodes %g, lease_takeovers_total %g\n",
			id, m["hourglass_partitions_owned"], m["hourglass_cluster_nodes"], m["hourglass_lease_takeovers_total"])
	}
	b.WriteString(r.Verdict.Report(10))
	return b.String()
}

// durationStats is "p50 …, max …" of ds, or "none".
func durationStats(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return fmt.Sprintf("p50 %s, max %s, min %s", s[len(s)/2].Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond), s[0].Round(time.Millisecond))
}

// Soak runs a cluster under load for cfg.Duration while it kills,
// terminates and pauses random nodes (never the last live one) and brings
// them back, then restores every node, stops the load and judges the
// database. It returns an error when the soak itself could not run (a node
// would not start, the database could not be read); a bad outcome is in
// the report's Verdict.
func Soak(ctx context.Context, cfg SoakConfig) (*SoakReport, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	ttl := cfg.ttl()
	logf := cfg.Cluster.logf
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x6368616f73))
	report := &SoakReport{Seed: cfg.Seed, Actions: map[string]int{}, Metrics: map[string]map[string]float64{}}

	c, err := Start(ctx, cfg.Cluster, cfg.Nodes)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	clusterAPI := true
	if v, err := c.WaitBalanced(ctx, 3*ttl+10*time.Second); errors.Is(err, ErrNoClusterAPI) {
		clusterAPI = false
		logf("soak: the binary has no /v1/cluster: takeovers are not measured")
	} else if err != nil {
		return nil, fmt.Errorf("soak: the cluster did not balance: %w", err)
	} else {
		logf("soak: balanced: %s", v.Summary())
	}
	load, err := c.StartLoad(ctx, cfg.Load)
	if err != nil {
		return nil, err
	}
	defer load.Stop()

	// kills are the measured SIGKILLs, for KillLateness.
	type kill struct {
		at    time.Time
		took  time.Duration
		parts []int
	}
	var kills []kill
	// due are the restarts and resumes waiting for their time.
	type comeback struct {
		at   time.Time
		node *Node
	}
	var due []comeback
	comeBack := func(cb comeback) error {
		if cb.node.Paused() {
			report.Actions["resume"]++
			return cb.node.Resume()
		}
		newID := rng.Float64() < cfg.NewIDShare
		report.Actions["restart"]++
		if err := cb.node.Restart(ctx, newID); err != nil {
			return err
		}
		logf("soak: %s back (new id: %t)", cb.node.ID(), newID)
		return nil
	}
	span := func(lo, hi float64) time.Duration {
		return time.Duration((lo + rng.Float64()*(hi-lo)) * float64(ttl))
	}

	end := time.Now().Add(cfg.Duration)
	for time.Now().Before(end) {
		wait := time.Duration((0.5 + rng.Float64()) * float64(cfg.Gap))
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
		slices.SortFunc(due, func(a, b comeback) int { return a.at.Compare(b.at) })
		for len(due) > 0 && !due[0].at.After(time.Now()) {
			if err := comeBack(due[0]); err != nil {
				return nil, err
			}
			due = due[1:]
		}
		live := c.Live()
		if len(live) < 2 {
			continue
		}
		victim := live[rng.IntN(len(live))]
		action := cfg.Actions[rng.IntN(len(cfg.Actions))]
		id := victim.ID()
		var parts []int
		if clusterAPI {
			if v, _, err := c.View(ctx); err == nil {
				parts = v.Owned(id)
			}
		}
		report.Actions[action]++
		at := time.Now()
		switch action {
		case ActionKill:
			err = victim.Kill()
			due = append(due, comeback{at.Add(span(1, 3)), victim})
		case ActionTerm:
			err = victim.Term()
			due = append(due, comeback{at.Add(span(1, 3)), victim})
		case ActionPause:
			err = victim.Pause()
			due = append(due, comeback{at.Add(span(0.5, 3)), victim})
		}
		if err != nil {
			return nil, err
		}
		logf("soak: %s %s (it owned %d partitions)", action, id, len(parts))
		switch {
		case action == ActionPause:
			continue
		case !clusterAPI:
			report.Unmeasured = append(report.Unmeasured, fmt.Sprintf("%s of %s: no /v1/cluster", action, id))
			continue
		case len(parts) == 0:
			report.Unmeasured = append(report.Unmeasured, fmt.Sprintf("%s of %s: it owned no partition yet", action, id))
			continue
		}
		took, v, err := c.WaitTakenOver(ctx, at, id, parts, 3*ttl+5*time.Second)
		if err != nil {
			report.Unmeasured = append(report.Unmeasured, fmt.Sprintf("%s of %s at %s: %v", action, id, at.Format("15:04:05.000"), err))
			continue
		}
		logf("soak: %s's %d partitions owned by live nodes %s after the %s: %s", id, len(parts), took.Round(time.Millisecond), action, v.Summary())
		if action == ActionKill {
			report.Takeovers = append(report.Takeovers, took)
			kills = append(kills, kill{at, took, parts})
		} else {
			report.Handovers = append(report.Handovers, took)
		}
	}

	// Bring every node back and let the load run one more TTL on all.
	for _, cb := range due {
		if err := comeBack(cb); err != nil {
			return nil, err
		}
	}
	if !testenv.Until(ctx, time.Now().Add(ttl)) {
		return nil, ctx.Err()
	}
	ledger := load.Stop()
	for _, n := range c.Live() {
		if m, err := n.Metrics(ctx); err == nil {
			report.Metrics[n.ID()] = m
		}
	}
	logf("soak: load stopped after %d creates; judging", len(ledger.Creates))
	report.Verdict, err = Judge(ctx, JudgeConfig{
		DatabaseURL:    cfg.Cluster.NodeDatabaseURL(0),
		Ledger:         ledger,
		LateBound:      cfg.LateBound,
		RequestTimeout: cmp.Or(cfg.Load.RequestTimeout, LoadRequestTimeoutDefault),
	})
	if err != nil {
		return nil, err
	}
	for _, k := range kills {
		late, n := report.Verdict.MaxLateness(func(c Close) bool {
			return slices.Contains(k.parts, c.Partition) && !c.Deadline.Before(k.at) && c.Deadline.Before(k.at.Add(k.took))
		})
		if n > 0 {
			report.KillLateness = append(report.KillLateness, late)
		}
	}
	return report, nil
}
