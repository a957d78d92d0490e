package main

import (
	"fmt"
	"time"
)

// clusterFlags configure this process's part in a cluster of processes
// sharing one PostgreSQL or MySQL database.
type clusterFlags struct {
	NodeID         string        `help:"This node's name in the cluster (default: the host name and a random suffix)." env:"HOURGLASS_NODE_ID"`
	LeaseTTL       time.Duration `help:"How long a node's partition leases last without renewal: a node that stops renewing loses its partitions to the others after this." default:"5s" env:"HOURGLASS_LEASE_TTL"`
	MaxDBClockSkew time.Duration `name:"max-db-clock-skew" help:"Most the clock of one database server (a Galera node) may run ahead of another's, as the nodes measure them (their own clocks NTP-synchronised): beyond it the nodes of the server ahead work no partition and answer 503 on /readyz, and the db_clock_skew alert fires. The same on every node." default:"100ms" env:"HOURGLASS_MAX_DB_CLOCK_SKEW"`
}

// validate checks the flags node.Cluster would otherwise read as "default"
// (zero).
func (f clusterFlags) validate() error {
	if f.MaxDBClockSkew <= 0 || f.MaxDBClockSkew > time.Minute {
		return fmt.Errorf("--max-db-clock-skew must be above 0 and at most 1m, got %s", f.MaxDBClockSkew)
	}
	return nil
}
