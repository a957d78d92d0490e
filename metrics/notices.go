package metrics

import "github.com/prometheus/client_golang/prometheus"

// newNoticesRejected registers hourglass_notices_rejected_total{channel}:
// notices on the PostgreSQL store's NOTIFY channels that hourglass did not
// send (store.Options.ObserveNoticeRejected).
func newNoticesRejected(reg *prometheus.Registry) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hourglass_notices_rejected_total",
		Help: "Notices on the PostgreSQL store's NOTIFY channels that hourglass did not send (an unreadable payload), by channel: created, deliveries, requests. Ignored; any role that can connect can NOTIFY.",
	}, []string{"channel"})
	reg.MustRegister(c)
	for _, ch := range []string{"created", "deliveries", "requests"} {
		c.WithLabelValues(ch)
	}
	return c
}

// NoticeRejected counts one notice hourglass did not send
// (store.Options.ObserveNoticeRejected).
func (m *Metrics) NoticeRejected(channel string) { m.noticesRejected.WithLabelValues(channel).Inc() }
