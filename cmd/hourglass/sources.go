package main

import (
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/source"
)

// sourceFlags are the settings of the shop's own tables (package source).
type sourceFlags struct {
	Sources            string        `help:"A YAML file of sources: shops' own tables whose rows hourglass closes at their deadline (docs/sources.md)." env:"HOURGLASS_SOURCES" type:"path"`
	SourceTailInterval time.Duration `help:"How often each source's table is read for new rows (by key)." default:"250ms" env:"HOURGLASS_SOURCE_TAIL_INTERVAL"`
	SourceBlockedAlert time.Duration `help:"How long a source row may stay locked by the shop's transactions, its close retried, before an ERROR and the source_row_blocked alert (1s to 24h)." default:"10s" env:"HOURGLASS_SOURCE_BLOCKED_ALERT"`
}

// sources reads the --sources file, if any.
func (f sourceFlags) sources() ([]hourglass.Source, error) {
	if f.Sources == "" {
		return nil, nil
	}
	return source.Load(f.Sources)
}
