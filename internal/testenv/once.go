package testenv

import "sync"

// OnceEach builds a value once per key and gives every later caller with
// that key the same value, or the same error: what a test process builds
// for all its tests (a template database per server, say). The zero value
// is ready to use; it is safe for concurrent use, and a caller with a key
// being built waits for that build.
type OnceEach[T any] struct {
	mu    sync.Mutex
	built map[string]*onceEntry[T]
}

type onceEntry[T any] struct {
	once sync.Once
	v    T
	err  error
}

// Get returns key's value, calling build first if no caller has.
func (o *OnceEach[T]) Get(key string, build func() (T, error)) (T, error) {
	o.mu.Lock()
	if o.built == nil {
		o.built = map[string]*onceEntry[T]{}
	}
	e := o.built[key]
	if e == nil {
		e = &onceEntry[T]{}
		o.built[key] = e
	}
	o.mu.Unlock()
	e.once.Do(func() { e.v, e.err = build() })
	return e.v, e.err
}
