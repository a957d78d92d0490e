package api

import (
	"context"
	"net/http"

	"github.com/hourglass/hourglass"
)

// ClusterSource answers GET /v1/cluster (cluster.Membership, or
// cluster.Single for a store one process owns).
type ClusterSource interface {
	View(ctx context.Context) (hourglass.ClusterView, error)
}

// ClusterJSON is the wire form of GET /v1/cluster.
type ClusterJSON struct {
	Partitions int        `json:"partitions"`
	Nodes      []NodeJSON `json:"nodes"`
}

// NodeJSON is one live node: when it started and was last seen (the
// database's clock) and the partitions it owns, ascending.
type NodeJSON struct {
	ID         string  `json:"id"`
	Addr       string  `json:"addr"`
	StartedAt  *string `json:"started_at"`
	LastSeen   *string `json:"last_seen"`
	Partitions []int   `json:"partitions"`
	Self       bool    `json:"self"`
}

func newClusterJSON(v hourglass.ClusterView) ClusterJSON {
	out := ClusterJSON{Partitions: v.Partitions, Nodes: make([]NodeJSON, 0, len(v.Nodes))}
	for _, n := range v.Nodes {
		parts := n.Partitions
		if parts == nil {
			parts = []int{}
		}
		out.Nodes = append(out.Nodes, NodeJSON{ID: n.ID, Addr: n.Addr, StartedAt: formatTime(n.StartedAt), LastSeen: formatTime(n.LastSeen), Partitions: parts, Self: n.Self})
	}
	return out
}

func (s *Server) clusterRoutes() []route {
	if s.cfg.Cluster == nil {
		return nil
	}
	return []route{{"GET", "/v1/cluster", s.getCluster}}
}

func (s *Server) getCluster(r *http.Request, _ []byte) (int, any, error) {
	v, err := s.cfg.Cluster.View(r.Context())
	if err != nil {
		return 0, nil, hourglass.Errorf(hourglass.CodeUnavailable, "read the cluster's state: %s", hourglass.ErrorMessage(err))
	}
	return http.StatusOK, newClusterJSON(v), nil
}

// Cluster returns the nodes sharing the server's database and the
// partitions each owns.
func (c *Client) Cluster(ctx context.Context) (ClusterJSON, error) {
	var out ClusterJSON
	_, err := c.Do(ctx, http.MethodGet, "/v1/cluster", nil, nil, &out)
	return out, err
}
