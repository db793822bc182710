//go:build !race

package kubelet

// raceEnabled: see race_test.go.
const raceEnabled = false
