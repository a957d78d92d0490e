//go:build !race

package api_test

// raceEnabled: see race_on_test.go.
const raceEnabled = false
