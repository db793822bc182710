package exporter

import "time"

// SetShutdownGrace shortens how long s waits for connections at shutdown.
func (s *Server) SetShutdownGrace(d time.Duration) { s.grace = d }
