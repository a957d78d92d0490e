package main

import (
	"fmt"
	"log/slog"
	"math"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
)

// runtimeFlags set the Go runtime's garbage collector for serve: the
// process's, so they are applied here, not by a node (tests run several
// nodes in one process).
type runtimeFlags struct {
	GCPercent   string `help:"The garbage collector's target, as GOGC: the heap may grow by this percent of the live heap before a collection, 10 to 10000, or off (only with --memory-limit). Empty: GOGC from the environment if set, else 400 (hourglass's live heap is a few MB, so at Go's 100 a collection comes every few hundred creates; 400 spends less CPU a request for some more memory)." env:"HOURGLASS_GC_PERCENT"`
	MemoryLimit string `help:"A soft limit on the Go runtime's memory (GOMEMLIMIT): the collector runs more often as the process nears it, whatever --gc-percent says. A size in bytes with B, KiB, MiB, GiB or TiB, at least 64MiB. Empty: GOMEMLIMIT from the environment if set, else none. It does not count the embedded SQLite's own memory." env:"HOURGLASS_MEMORY_LIMIT"`
}

// GCPercentDefault is --gc-percent's default when GOGC is not set.
const GCPercentDefault = 400

// minMemoryLimit is the least --memory-limit: below it the collector
// would run all the time for hourglass's own working set.
const minMemoryLimit = 64 << 20

// gcSettings is what runtimeFlags resolve to: a percent for
// debug.SetGCPercent and a limit for debug.SetMemoryLimit (math.MaxInt64:
// none); a field is left to the runtime (which read GOGC or GOMEMLIMIT)
// when its keep flag is set.
type gcSettings struct {
	percent     int
	keepPercent bool // GOGC is set and --gc-percent is not
	limit       int64
	keepLimit   bool // GOMEMLIMIT is set and --memory-limit is not
}

// settings checks the flags and resolves them against the environment
// (getenv reads GOGC and GOMEMLIMIT), or returns an error naming the flag
// to fix.
func (f *runtimeFlags) settings(getenv func(string) string) (gcSettings, error) {
	var s gcSettings
	switch n, err := strconv.Atoi(f.GCPercent); {
	case f.GCPercent == "" && getenv("GOGC") != "":
		s.keepPercent = true
	case f.GCPercent == "":
		s.percent = GCPercentDefault
	case f.GCPercent == "off":
		s.percent = -1
	case err == nil && n >= 10 && n <= 10000:
		s.percent = n
	default:
		return gcSettings{}, fmt.Errorf("--gc-percent: want 10 to 10000 or off (with --memory-limit), got %q", f.GCPercent)
	}
	switch {
	case f.MemoryLimit == "" && getenv("GOMEMLIMIT") != "":
		s.keepLimit = true
	case f.MemoryLimit == "":
		s.limit = math.MaxInt64
	default:
		n, err := parseSize(f.MemoryLimit)
		if err != nil || n < minMemoryLimit {
			return gcSettings{}, fmt.Errorf("--memory-limit: want a size of at least 64MiB (e.g. 512MiB, 2GiB), got %q", f.MemoryLimit)
		}
		s.limit = n
	}
	if s.percent == -1 && !s.keepLimit && s.limit == math.MaxInt64 {
		return gcSettings{}, fmt.Errorf("--gc-percent off needs --memory-limit: the heap would grow without bound")
	}
	return s, nil
}

// apply sets the runtime's collector to s and logs what is in force.
func (s gcSettings) apply(log *slog.Logger) {
	if !s.keepPercent {
		debug.SetGCPercent(s.percent)
	}
	if !s.keepLimit {
		debug.SetMemoryLimit(s.limit)
	}
	// What is in force, GOGC's and GOMEMLIMIT's included.
	m := []metrics.Sample{{Name: "/gc/gogc:percent"}, {Name: "/gc/gomemlimit:bytes"}}
	metrics.Read(m)
	percent, limit := "off", "none"
	if p := int64(m[0].Value.Uint64()); p >= 0 {
		percent = strconv.FormatInt(p, 10)
	}
	if l := m[1].Value.Uint64(); l < math.MaxInt64 {
		limit = strconv.FormatUint(l>>20, 10) + "MiB"
	}
	log.Info("hourglass: garbage collector", "gc_percent", percent, "memory_limit", limit)
}

// parseSize reads a size as GOMEMLIMIT writes it: a whole number of bytes
// with an optional unit, B, KiB, MiB, GiB or TiB.
func parseSize(s string) (int64, error) {
	units := []struct {
		suffix string
		shift  uint
	}{{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}, {"B", 0}}
	num, shift := s, uint(0)
	for _, u := range units {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			num, shift = n, u.shift
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64>>shift {
		return 0, fmt.Errorf("size %q: want a whole number of bytes with B, KiB, MiB, GiB or TiB", s)
	}
	return n << shift, nil
}
