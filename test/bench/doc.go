// Package bench holds gpuxray's measurements that are not Go benchmarks of
// one package: the accuracy comparison against the usual gauge method (a
// test on the virtual clock), and the harness that runs the real binary on
// simulated nodes (go test ./test/bench -run Harness -harness).
// See docs/benchmarks.md.
package bench
