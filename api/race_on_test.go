//go:build race

package api_test

// raceEnabled: the race detector keeps shadow memory beside the heap, so a
// process's RSS says little about what a request costs; memory tests read
// the runtime's own counts then.
const raceEnabled = true
