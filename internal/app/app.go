// Package app is gpuxray's command line, shared by the two binaries that
// serve it: cmd/gpuxray (the agent as it runs on a node, and the image's
// binary) and cmd/gpuxray-sim (the same commands, plus a simulated node for
// `agent --simulate` and `replay`). Each command is parsed into a
// configuration, validated by its one Validate, built from the sources it
// is given, then run. The simulator reaches the agent only through the
// Simulator and Sources this package declares, so the production binary
// links none of it (docs/design/simulator-build.md).
//
//	gpuxray [agent] [flags]          run the agent (the default)
//	gpuxray report --prometheus URL  the capacity verdict from a range of Prometheus data
//	gpuxray version                  print the version
//	gpuxray-sim agent --simulate [FILE]  run the agent on a simulated node (FILE, or the embedded demo)
//	gpuxray-sim replay [flags] FILE      replay a scenario on a virtual clock, print the final metrics
package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// exitUsage is the exit code for bad flags, files or configuration.
const exitUsage = 2

// simBinary is the binary that has the simulator, which the production
// binary's --simulate and replay point to.
const simBinary = "gpuxray-sim"

// Binary is one of gpuxray's binaries: its version, stamped by the build,
// and its simulator, nil in the production binary.
type Binary struct {
	// Version and Revision are the ldflags' -X main.version and
	// main.revision; empty, they come from Go's build information.
	Version, Revision string
	// Simulator runs `agent --simulate` and `replay`; nil leaves them out.
	Simulator Simulator
}

// Main runs the command line of the process and returns its exit code.
func (b Binary) Main() int {
	// Caught from the start, so that start-up (a scenario being read, say)
	// ends cleanly on them too. After the first, the default action is
	// back: a second SIGINT or SIGTERM ends a process that does not stop.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	context.AfterFunc(ctx, stop)
	code := b.Run(context.WithValue(ctx, wholeProcess{}, true), os.Args[1:], os.Stdout, os.Stderr)
	stop()
	return code
}

// UsageError is bad input found at start-up: exit 2 with its one sentence.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

// usageError is the short name this package's code uses.
type usageError = UsageError

// Usagef is a UsageError of a formatted sentence.
func Usagef(format string, a ...any) error { return UsageError{fmt.Errorf(format, a...)} }

func usagef(format string, a ...any) error { return Usagef(format, a...) }

// Run runs one command until it ends or ctx is done, and returns the exit
// code.
func (b Binary) Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmd := "agent"
	switch {
	case len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help"):
		// The commands first: "gpuxray agent -h" lists the agent's flags.
		cmd, args = "help", nil
	case len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-':
		cmd, args = args[0], args[1:]
	}
	if cmd == "help" && len(args) > 0 {
		// "gpuxray help replay" is "gpuxray replay -h".
		cmd, args = args[0], []string{"-h"}
	}
	var err error
	switch cmd {
	case "agent":
		err = b.runAgent(ctx, args, stderr)
	case "replay":
		err = b.runReplay(ctx, args, stdout, stderr)
	case "report":
		err = runReport(ctx, args, stdout, stderr)
	case "version":
		if len(args) > 0 {
			err = usagef("unexpected argument %q: version takes none", args[0])
			break
		}
		fmt.Fprintln(stdout, b.versionString())
	case "help":
		fmt.Fprint(stdout, b.usage())
	default:
		err = usagef("unknown command %q; the commands are %s", cmd, b.commands())
	}
	var ue usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		// A signal, before the command finished its work.
		fmt.Fprintf(stderr, "gpuxray %s: interrupted\n", cmd)
		return 1
	case errors.As(err, &ue):
		// One sentence, even of a joined error or a YAML decoder's list.
		fmt.Fprintf(stderr, "gpuxray %s: %s\n", cmd, oneLine(ue.Err.Error()))
		return exitUsage
	default:
		fmt.Fprintf(stderr, "gpuxray %s: %v\n", cmd, err)
		return 1
	}
}

func (b Binary) commands() string {
	if b.Simulator == nil {
		return "agent, report and version"
	}
	return "agent, replay, report and version"
}

// errNoSimulator is the production binary's answer to --simulate and replay.
func errNoSimulator(what string) error {
	return usagef("%s needs the simulator, which this binary leaves out: run %s (go run ./cmd/%s, or make demo)", what, simBinary, simBinary)
}

func (b Binary) usage() string {
	if b.Simulator == nil {
		return topUsage
	}
	return topUsageSim
}

const topUsage = `gpuxray: where the GPU time you own goes, and whose it is.

Usage:
  gpuxray agent [flags]            run the node agent (the default command)
  gpuxray report --prometheus URL  "do we need more GPUs?": the capacity verdict from a range of data
  gpuxray version                  print the version

Run "gpuxray help COMMAND" (or "gpuxray COMMAND -h") for a command's flags. Every flag can also be
set by an environment variable: --poll.interval is GPUXRAY_POLL_INTERVAL. Bad input is one sentence
on stderr and exit code 2. The simulated node (agent --simulate, replay) is in gpuxray-sim.
`

const topUsageSim = `gpuxray: where the GPU time you own goes, and whose it is.

Usage:
  gpuxray agent [flags]            run the node agent (the default command); --simulate [FILE]
                                   runs it on a simulated node (FILE, or the embedded demo)
  gpuxray replay [flags] FILE      replay a scenario as fast as possible and print the final metrics
  gpuxray report --prometheus URL  "do we need more GPUs?": the capacity verdict from a range of data
  gpuxray version                  print the version

Run "gpuxray help COMMAND" (or "gpuxray COMMAND -h") for a command's flags. Every flag can also be
set by an environment variable: --poll.interval is GPUXRAY_POLL_INTERVAL. Bad input is one sentence
on stderr and exit code 2.
`
