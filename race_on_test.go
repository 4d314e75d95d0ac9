//go:build race

package twice_test

// raceDetector is true when the tests run with -race, which makes the
// runtime's hot path some ten times slower: tests that work a volume of jobs
// scale it down (the full volume runs without -race).
const raceDetector = true
