package api

import (
	"net/http"
	"time"

	"github.com/hourglass/hourglass"
)

// extendRequest is the body of POST /v1/orders/{id}/extend: exactly one of
// its fields.
type extendRequest struct {
	Deadline *string `json:"deadline"`
	ExtendMs *int64  `json:"extend_ms"`
}

// decodeExtend parses an extension of order id. Errors: invalid_argument
// naming the field.
func decodeExtend(id int64, body []byte) (hourglass.ExtendOrderParams, error) {
	p := hourglass.ExtendOrderParams{ID: id}
	var req extendRequest
	if err := decodeJSON(body, &req, false); err != nil {
		return p, err
	}
	switch {
	case req.Deadline != nil && req.ExtendMs != nil:
		return p, hourglass.Errorf(hourglass.CodeInvalidArgument, "deadline, extend_ms: give exactly one, not both")
	case req.Deadline != nil:
		t, err := time.Parse(time.RFC3339Nano, *req.Deadline)
		if err != nil {
			return p, hourglass.Errorf(hourglass.CodeInvalidArgument, "deadline: %q is not an RFC 3339 time (e.g. 2026-11-24T10:00:00.000Z)", *req.Deadline)
		}
		if y := t.UTC().Year(); y > 9999 || y < 1970 {
			return p, hourglass.Errorf(hourglass.CodeInvalidArgument, "deadline: %q is outside 1970 to 9999", *req.Deadline)
		}
		// Deadlines are whole milliseconds: round up, so an order never
		// closes before the time asked for.
		ms := hourglass.UnixMilli(t)
		if t.After(hourglass.FromUnixMilli(ms)) {
			ms++
		}
		p.Deadline = hourglass.FromUnixMilli(max(ms, 1))
	case req.ExtendMs != nil:
		ms := *req.ExtendMs
		if ms < 1 || ms > hourglass.MaxOrderLifetime.Milliseconds() {
			return p, hourglass.Errorf(hourglass.CodeInvalidArgument, "extend_ms: must be 1 to %d, got %d", hourglass.MaxOrderLifetime.Milliseconds(), ms)
		}
		p.By = time.Duration(ms) * time.Millisecond
	default:
		return p, hourglass.Errorf(hourglass.CodeInvalidArgument, "deadline, extend_ms: one of them is required")
	}
	return p, p.Validate()
}

// extendOrder serves POST /v1/orders/{id}/extend: 200 with the order and
// its new deadline (or, for a repeat of an extension that took effect, as
// it is); 400 for a deadline not later than the order's or more than 7
// days after its creation; 409 invalid_transition when the order is not
// pending or its deadline passed; 404 for an unknown order.
func (s *Server) extendOrder(r *http.Request, body []byte) (int, any, error) {
	id, err := parseID(r.PathValue("id"))
	if err != nil {
		return 0, nil, err
	}
	p, err := decodeExtend(id, body)
	if err != nil {
		return 0, nil, err
	}
	o, err := s.cfg.Store.ExtendOrder(r.Context(), p)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, orderAnswer(o.View(s.clock.Now())), nil
}
