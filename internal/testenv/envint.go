package testenv

import (
	"os"
	"strconv"
	"testing"
)

// PositiveInt returns the environment variable name as a positive integer,
// or def when it is unset: the size a test or benchmark runs at, which a
// longer documented run raises. A value that is not a positive integer
// fails the test, naming the variable.
func PositiveInt(t testing.TB, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}
