// Package hourglass holds the domain of an order-timeout service: products
// with reserved stock, orders with a payment deadline, the order state
// machine, per-category timeout policies, clients' timers, the shop's own
// tables (sources), the error codes every component speaks, and the
// interfaces (Database, Scheduler, Clock, …) the rest is built on. It
// imports only the standard library. Adapters live in subpackages: the
// stores under store/, the delay mechanisms under delay/, the HTTP API in
// api/; the in-memory timing core is timing/, the close path engine/, and
// one composition root, node/, builds a running node from a node.Config
// (cmd/hourglass only turns flags and environment into one).
//
// The invariant the whole system protects: an order that is not paid before
// its deadline is closed exactly once and its reserved stock is released in
// the same transaction that changes its status; an order is never payable at
// or after its deadline.
package hourglass
