package api

// DashboardSource is what the dashboard routes need.
// (Filled in with the dashboard feature.)
type DashboardSource interface{}

// dashboardRoutes returns the dashboard's routes (GET / and its data).
func (s *Server) dashboardRoutes() []route { return nil }
