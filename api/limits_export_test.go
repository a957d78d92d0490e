package api

import "net/http"

// BodyBytesHeld returns the bytes of its budget the server behind h (a
// Server.Handler) holds now: request bodies and responses in flight. Tests
// wait on it to know a request holds its reservation before they send
// others.
func BodyBytesHeld(h http.Handler) int64 {
	b := h.(rootHandler).s.bodies
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.size - b.free
}
