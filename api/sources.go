package api

import (
	"net/http"

	"github.com/hourglass/hourglass"
)

// SourceBadRows answers GET /v1/sources/{name}/bad-rows (source.Runner):
// the pending rows of a shop's table (--sources) that hourglass skips.
type SourceBadRows interface {
	// BadRowList returns the latest bad rows of source name, newest
	// first, and how many this node reported since it started; ok false:
	// no such source. Safe for concurrent use.
	BadRowList(name string) (rows []hourglass.BadSourceRow, total int64, ok bool)
}

// SourceBadRowJSON is a pending row hourglass skips: its key and deadline
// as the shop's database writes them, why, and when this node found it.
type SourceBadRowJSON struct {
	Key      string `json:"key"`
	Deadline string `json:"deadline"`
	Reason   string `json:"reason"`
	FoundAt  string `json:"found_at"`
}

// SourceBadRowListJSON is the response of GET /v1/sources/{name}/bad-rows:
// the latest rows (up to 1,000, newest first) and how many were found.
type SourceBadRowListJSON struct {
	Source string             `json:"source"`
	Total  int64              `json:"total"`
	Rows   []SourceBadRowJSON `json:"rows"`
}

func (s *Server) sourceRoutes() []route {
	if s.cfg.Sources == nil {
		return nil
	}
	return []route{{"GET", "/v1/sources/{name}/bad-rows", s.listSourceBadRows}}
}

func (s *Server) listSourceBadRows(r *http.Request, _ []byte) (int, any, error) {
	name := r.PathValue("name")
	rows, total, ok := s.cfg.Sources.BadRowList(name)
	if !ok {
		return 0, nil, hourglass.Errorf(hourglass.CodeNotFound, "no source %q on this node (--sources)", name)
	}
	out := SourceBadRowListJSON{Source: name, Total: total, Rows: make([]SourceBadRowJSON, len(rows))}
	for i, b := range rows {
		out.Rows[i] = SourceBadRowJSON{Key: b.Key, Deadline: b.Deadline, Reason: b.Reason, FoundAt: *formatTime(b.FoundAt)}
	}
	return http.StatusOK, out, nil
}
