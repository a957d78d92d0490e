// Package hourglass holds the domain of an order-timeout service: products
// with reserved stock, orders with a payment deadline, the order state
// machine, per-category timeout policies, the error codes every component
// speaks, and the interfaces (Store, Clock) the engine and the API are built
// on. It imports only the standard library; adapters live in subpackages
// (store/sqlite, api, engine, timingwheel) and all wiring is in cmd/hourglass.
//
// The invariant the whole system protects: an order that is not paid before
// its deadline is closed exactly once and its reserved stock is released in
// the same transaction that changes its status; an order is never payable at
// or after its deadline.
package hourglass
