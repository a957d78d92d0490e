//go:build race

package source_test

// raceEnabled: the race detector slows the process several times over, so
// the shop tests run smaller and check no time bound (.ci/run runs them
// again without it, full size).
const raceEnabled = true
