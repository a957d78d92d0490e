package sqlq

import (
	"context"
	"time"

	"github.com/hourglass/hourglass"
)

// SinkCursors implements hourglass.EventLog.
func (s *Store) SinkCursors(ctx context.Context, sink string) ([]hourglass.SinkCursor, error) {
	var (
		out []hourglass.SinkCursor
		c   = hourglass.SinkCursor{Sink: sink}
	)
	err := s.read(ctx, "sink cursors", func(x q) error {
		out = out[:0]
		return x.each(ctx, `SELECT part, seq FROM event_sink_cursors WHERE sink = ? ORDER BY part`, []any{sink},
			[]any{&c.Part, &c.Seq}, func() error {
				out = append(out, c)
				return nil
			})
	})
	return out, err
}

// SaveSinkCursors implements hourglass.EventLog: one multi-row upsert (a
// cursor never moves back), in the low lane of a store whose writes queue.
func (s *Store) SaveSinkCursors(ctx context.Context, cursors []hourglass.SinkCursor, now time.Time) error {
	if len(cursors) == 0 {
		return nil
	}
	args := make([]any, 0, 4*len(cursors))
	for _, c := range cursors {
		args = append(args, c.Sink, c.Part, c.Seq, hourglass.UnixMilli(now))
	}
	query := `INSERT INTO event_sink_cursors (sink, part, seq, touched_at) VALUES ` + Placeholders(len(cursors), 4) +
		s.d.Upsert("event_sink_cursors", "sink, part", []string{"seq", "touched_at"}, map[string]bool{"seq": true})
	return s.write(ctx, "save sink cursors", Low, func(x q) error {
		_, err := x.exec(ctx, query, args...)
		return err
	})
}
