package pgtest

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// ProcessCPU returns the CPU time process pid (a server backend) used so
// far, from /proc/<pid>/schedstat, false when it cannot be read (the
// process ended, or the server is not on this machine). The benchmarks
// that price the server's share of a batch sum it over a database's
// backends (pg_stat_activity).
func ProcessCPU(pid int32) (time.Duration, bool) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(stat))
	if len(f) == 0 {
		return 0, false
	}
	ns, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return 0, false
	}
	return time.Duration(ns), true
}
