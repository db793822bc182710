// Package load holds tests that drive the agent's real HTTP server and
// handler with many clients at once: a scraper must keep its scrapes
// while other clients flood /metrics.
package load
