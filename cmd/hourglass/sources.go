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
}

// sources reads the --sources file, if any.
func (f sourceFlags) sources() ([]hourglass.Source, error) {
	if f.Sources == "" {
		return nil, nil
	}
	return source.Load(f.Sources)
}
