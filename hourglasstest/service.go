package hourglasstest

import (
	"testing"

	"github.com/hourglass/hourglass/internal/testenv"
)

// ServiceURL is testenv.ServiceURL, kept for the tests of modules that
// cannot import this module's internal packages (peers/). Tests inside this
// module use internal/testenv directly.
func ServiceURL(t testing.TB, name, env, def string) string {
	t.Helper()
	return testenv.ServiceURL(t, name, env, def)
}
