// Package processtest holds the tests that build the hourglass binary and
// run it as processes: start-up and flags seen from outside, crash
// recovery after a SIGKILL, clusters of several nodes (takeovers, webhooks
// and timer requests across churn, sources on three nodes), event sinks and
// webhooks across a kill, the container image's entrypoint, and the
// benchmarks of a running server. The binary is built once per test run,
// without the race detector.
//
// Each test states its tier (internal/testenv): the Default tier's run in
// `go test -race ./...`, on SQLite; the Processes tier's (several nodes with
// time bounds, the SIGKILL tests that read back 10,000 timers or events)
// run without -race, with HOURGLASS_TEST_TIER=processes (brokers for those
// whose nodes use Redis, RabbitMQ or NATS); the Matrix tier
// runs the one-process tests on PostgreSQL and MariaDB. See docs/testing.md.
package processtest
