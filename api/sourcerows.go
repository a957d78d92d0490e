package api

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hourglass/hourglass"
)

// Bounds of GET /v1/sources/{name}/rows.
const (
	SourceRowLimitDefault = 50
	MaxSourceRowLimit     = 1000
)

// SourceRowJSON is one row of a source: pending (read from the shop's
// table now) or closed by hourglass (from its source.closed event).
type SourceRowJSON struct {
	Key      int64   `json:"key"`
	Status   string  `json:"status"`
	Deadline string  `json:"deadline"`
	ClosedAt *string `json:"closed_at"`
	ClosedBy *string `json:"closed_by"`
	Node     *string `json:"node"`
	EventID  *string `json:"event_id"`
}

// SourceRowListJSON is the response of GET /v1/sources/{name}/rows: Next
// is the after of the next page, null on the last.
type SourceRowListJSON struct {
	Source string          `json:"source"`
	Rows   []SourceRowJSON `json:"rows"`
	Next   *string         `json:"next"`
}

// listSourceRows serves GET /v1/sources/{name}/rows?status=pending|closed
// &deadline_after=&deadline_before=&limit=&after=. Pending rows are read
// from the shop's table through the source's own pending condition and
// deadline index (the due scan's read), by (deadline, key); closed rows
// from hourglass's source.closed events, in the order they closed, at most
// hourglass.SourceClosedScanMax events read a request (a page may then
// hold fewer rows than limit, with a next).
func (s *Server) listSourceRows(r *http.Request, _ []byte) (int, any, error) {
	name := r.PathValue("name")
	q := r.URL.Query()
	known := []string{"status", "deadline_after", "deadline_before", "limit", "after"}
	for k := range q {
		if !slices.Contains(known, k) {
			return 0, nil, hourglass.Errorf(hourglass.CodeInvalidArgument, "unknown query parameter %q (want %s)", k, strings.Join(known, ", "))
		}
	}
	limit := SourceRowLimitDefault
	if v := q.Get("limit"); v != "" || q.Has("limit") {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxSourceRowLimit {
			return 0, nil, hourglass.Errorf(hourglass.CodeInvalidArgument, "limit: must be an integer from 1 to %d, got %q", MaxSourceRowLimit, v)
		}
		limit = n
	}
	status := q.Get("status")
	if status != "pending" && status != "closed" {
		return 0, nil, hourglass.Errorf(hourglass.CodeInvalidArgument, "status: must be pending or closed, got %q", status)
	}
	from, err := parseQueryTime(q, "deadline_after")
	if err != nil {
		return 0, nil, err
	}
	before, err := parseQueryTime(q, "deadline_before")
	if err != nil {
		return 0, nil, err
	}
	if !s.cfg.SourceRows.HasSource(name) {
		return 0, nil, hourglass.Errorf(hourglass.CodeNotFound, "no source %q on this node (--sources)", name)
	}
	out := SourceRowListJSON{Source: name, Rows: []SourceRowJSON{}}
	if status == "pending" {
		err = s.pendingSourceRows(r, name, from, before, limit, q.Get("after"), &out)
	} else {
		err = s.closedSourceRows(r, name, from, before, limit, q.Get("after"), &out)
	}
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, out, nil
}

// pendingSourceRows fills out with a page of pending rows by (deadline,
// key); after is a "deadline:<ms>:<key>" cursor.
func (s *Server) pendingSourceRows(r *http.Request, name string, from, before time.Time, limit int, after string, out *SourceRowListJSON) error {
	cur, err := parseTimeCursor("deadline", "status=pending", after)
	if err != nil {
		return err
	}
	p := hourglass.PendingDueParams{Until: hourglass.FromUnixMilli(hourglass.SourceDeadlineMaxMs), Limit: limit + 1}
	if !before.IsZero() {
		p.Until = before.Add(-time.Microsecond) // Until is inclusive
	}
	if !from.IsZero() {
		p.After = from // strictly after (from, key 0): a deadline at or after from
	}
	if cur.id != 0 && !cur.at.Before(from) {
		p.After, p.AfterID = cur.at, cur.id
	}
	if !before.IsZero() && !from.IsZero() && !from.Before(before) {
		return nil // an empty range
	}
	rows, _, err := s.cfg.SourceRows.PendingRows(r.Context(), name, p)
	if err != nil {
		return err
	}
	for i, row := range rows {
		if i == limit {
			next := timeCursor("deadline", rows[i-1].At, rows[i-1].ID)
			out.Next = &next
			break
		}
		out.Rows = append(out.Rows, SourceRowJSON{Key: row.ID, Status: "pending", Deadline: *formatTime(row.At)})
	}
	return nil
}

// closedSourceRows fills out with a page of closed rows in the order they
// closed; after is a "seq:<n>" cursor (an event's position).
func (s *Server) closedSourceRows(r *http.Request, name string, from, before time.Time, limit int, after string, out *SourceRowListJSON) error {
	var seq int64
	if after != "" {
		v, ok := strings.CutPrefix(after, "seq:")
		n, err := strconv.ParseInt(v, 10, 64)
		if !ok || err != nil || n < 0 {
			return hourglass.Errorf(hourglass.CodeInvalidArgument, "after: a list with status=closed is in close order; pass the next of its previous page (seq:<n>), got %q", after)
		}
		seq = n
	}
	read := 0
	for read < hourglass.SourceClosedScanMax {
		n := min(hourglass.SourceClosedScanMax-read, max(4*limit, 500))
		evs, err := s.cfg.History.SourceClosedEvents(r.Context(), seq, n)
		if err != nil {
			return err
		}
		read += len(evs)
		for _, e := range evs {
			seq = e.Seq
			var b sourceBody
			if json.Unmarshal(e.Body, &b) != nil || b.Source != name {
				continue
			}
			d, err := time.Parse(time.RFC3339Nano, b.Deadline)
			if err != nil || !from.IsZero() && d.Before(from) || !before.IsZero() && !d.Before(before) {
				continue
			}
			if len(out.Rows) == limit {
				next := "seq:" + strconv.FormatInt(e.Seq-1, 10)
				out.Next = &next
				return nil
			}
			by, node := provenance(e.By)
			out.Rows = append(out.Rows, SourceRowJSON{Key: b.Key, Status: "closed", Deadline: *formatTime(d), ClosedAt: formatTime(e.CreatedAt),
				ClosedBy: by, Node: node, EventID: &e.ID})
		}
		if len(evs) < n {
			return nil // the end of the closes
		}
	}
	next := "seq:" + strconv.FormatInt(seq, 10) // read as much as a request may: more may follow
	out.Next = &next
	return nil
}
