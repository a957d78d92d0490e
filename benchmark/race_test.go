//go:build race

package benchmark

const raceEnabled = true
