package metrics

import "github.com/prometheus/client_golang/prometheus"

// clusterMetrics are the collectors of a node's part in the cluster
// (package cluster reports through Metrics' Owned, Takeover and Nodes).
type clusterMetrics struct {
	owned     prometheus.Gauge
	takeovers prometheus.Counter
	nodes     prometheus.Gauge
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
	}
	reg.MustRegister(c.owned, c.takeovers, c.nodes)
	return c
}

// Owned implements cluster.Observer.
func (m *Metrics) Owned(n int) { m.cluster.owned.Set(float64(n)) }

// Takeover implements cluster.Observer.
func (m *Metrics) Takeover() { m.cluster.takeovers.Inc() }

// Nodes implements cluster.Observer.
func (m *Metrics) Nodes(n int) { m.cluster.nodes.Set(float64(n)) }
