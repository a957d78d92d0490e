package main

// debugFlags are the settings of the profiling listener (node.Config.DebugAddr).
type debugFlags struct {
	DebugAddr string `help:"Serve Go's runtime profiles (/debug/pprof/: CPU, heap, goroutines) on this address, apart from the API and without its token; empty: off. Bind it to loopback: profiles show what the process does." env:"HOURGLASS_DEBUG_ADDR"`
}
