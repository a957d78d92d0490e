package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// clusterMetrics are the collectors of a node's part in the cluster
// (package cluster reports through Metrics' Owned, Takeover and Nodes).
type clusterMetrics struct {
	owned     prometheus.Gauge
	takeovers prometheus.Counter
	nodes     prometheus.Gauge
	skew      prometheus.Gauge
}

func newClusterMetrics(reg *prometheus.Registry) clusterMetrics {
	c := clusterMetrics{
		owned: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "hourglass_partitions_owned",
			Help: "Partitions (of hourglass.Partitions) whose orders, deliveries and chores this node owns.",
		}),
		takeovers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hourglass_lease_takeovers_total",
			Help: "Partitions this node took from another node: an expired lease (the other stopped renewing) or a rebalance.",
		}),
		nodes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "hourglass_cluster_nodes",
			Help: "Live nodes sharing this node's database, this one included.",
		}),
		skew: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "hourglass_db_clock_skew_seconds",
			Help: "Largest difference between the clocks of two database servers the live nodes reach (Galera nodes), from the clock offsets the nodes publish; 0 with one database server. Deadlines written through one server are compared with another's clock: a server this far ahead closes orders this much early.",
		}),
	}
	reg.MustRegister(c.owned, c.takeovers, c.nodes, c.skew)
	return c
}

// Owned implements cluster.Observer.
func (m *Metrics) Owned(n int) { m.cluster.owned.Set(float64(n)) }

// Takeover implements cluster.Observer.
func (m *Metrics) Takeover() { m.cluster.takeovers.Inc() }

// Nodes implements cluster.Observer.
func (m *Metrics) Nodes(n int) { m.cluster.nodes.Set(float64(n)) }

// DBClockSkew implements cluster.ClockSkewObserver: it sets
// hourglass_db_clock_skew_seconds.
func (m *Metrics) DBClockSkew(d time.Duration) { m.cluster.skew.Set(d.Seconds()) }
