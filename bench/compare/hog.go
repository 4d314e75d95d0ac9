package main

// The CPU hog (-hog N) and the twice child's execution trace (-trace FILE).
//
// The hog is a separate process, this binary again with hogEnv set, that
// spins N goroutines on N threads. spawn starts it before every run of every
// side and kills it after, so both systems share the machine with the same
// contention, and the spinning is not inside the measured process's Go
// scheduler (where it would compete with the measured goroutines on Go's
// terms rather than on the kernel's, as another process does in
// production).

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/trace"
	"strconv"
)

// hogEnv, set in a child's environment, makes the child a hog of that many
// spinning threads instead of a compare process.
const hogEnv = "TWICE_COMPARE_HOG"

// traceEnv, set in the twice child's environment, makes it write a runtime
// execution trace of its run to the file it names (its pid appended).
const traceEnv = "TWICE_COMPARE_TRACE"

var (
	hogCores  = flag.Int("hog", 0, "keep `N` cores busy with a spinning process during every run of every side (0: none)")
	traceFile = flag.String("trace", "", "write a runtime/trace of each twice child's run to `FILE`.<pid> (read it with go tool trace)")
)

func init() {
	n, err := strconv.Atoi(os.Getenv(hogEnv))
	if err != nil || n <= 0 {
		return
	}
	// Package initialisation is as early as this binary can become the
	// hog: nothing else of compare runs in it.
	runtime.GOMAXPROCS(n + 1)
	for range n {
		go spin()
	}
	select {}
}

// spin burns a core until the process is killed.
func spin() {
	runtime.LockOSThread()
	x := uint64(1)
	for {
		x = x*6364136223846793005 + 1442695040888963407
		if x == 0 {
			// Never true; it keeps the loop from being optimised away.
			fmt.Fprintln(os.Stderr, x)
		}
	}
}

// hogNote is the header's description of the hog.
func hogNote() string {
	if *hogCores <= 0 {
		return "no CPU hog"
	}
	return fmt.Sprintf("CPU hog: %d spinning thread(s) in a separate process during every run", *hogCores)
}

// startHog starts the hog process if -hog asks for one, and returns the
// function that kills it and waits for it to exit.
func startHog() (stop func(), err error) {
	if *hogCores <= 0 {
		return func() {}, nil
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d", hogEnv, *hogCores))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the CPU hog: %w", err)
	}
	return func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}, nil
}

// childEnv is the environment of a child running system: the trace file,
// for twice's, when -trace asks for one.
func childEnv(system string) []string {
	env := os.Environ()
	if *traceFile != "" && (system == "twice" || system == "twice-full") {
		env = append(env, traceEnv+"="+*traceFile)
	}
	return env
}

// startTrace starts a runtime trace if the parent asked for one, and
// returns the function that stops it.
func startTrace() (stop func(), err error) {
	name := os.Getenv(traceEnv)
	if name == "" {
		return func() {}, nil
	}
	f, err := os.Create(fmt.Sprintf("%s.%d", name, os.Getpid()))
	if err != nil {
		return nil, fmt.Errorf("-trace: %w", err)
	}
	if err := trace.Start(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("-trace: %w", err)
	}
	return func() {
		trace.Stop()
		_ = f.Close()
	}, nil
}
