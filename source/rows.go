package source

// HasSource reports whether name is one of the runner's sources (the API's
// source rows routes answer 404 for any other). Safe for concurrent use.
func (r *Runner) HasSource(name string) bool {
	return r.source(name) != nil
}

// source returns the runner of the source name, or nil.
func (r *Runner) source(name string) *runner {
	for _, s := range r.srcs {
		if s.src.Name == name {
			return s
		}
	}
	return nil
}
