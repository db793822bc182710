package exporter

import "time"

// TextScrapes is how many scrapes the text fast path has served, in this
// process.
func TextScrapes() uint64 { return textScrapes.Load() }

// SetShutdownGrace shortens how long s waits for connections at shutdown.
func (s *Server) SetShutdownGrace(d time.Duration) { s.grace = d }
