//go:build race

package main

// raceEnabled: the race detector slows the embedded SQLite's interpreter
// down enough that tests reading many rows read a sample.
const raceEnabled = true
