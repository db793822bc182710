//go:build race

package main

// raceEnabled: the race detector runs this package's replays about seven
// times slower (a 4-hour scenario: 7 s without, 50 s with), so make test-e2e
// runs the long ones in a second pass without it (skipLongUnderRace).
const raceEnabled = true
