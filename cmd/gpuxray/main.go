// Command gpuxray is the gpuxray node agent: it attributes allocated-but-idle
// GPU time to the pods that hold it and serves it to Prometheus.
//
//	gpuxray [agent] [flags]          run the agent (the default)
//	gpuxray agent --simulate [FILE]  run it on a simulated node (FILE, or the embedded demo)
//	gpuxray replay [flags] FILE      replay a scenario on a virtual clock, print the final metrics
//	gpuxray report --prometheus URL  the capacity verdict from a range of Prometheus data
//	gpuxray version                  print the version
package main

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

func main() {
	// Caught from the start, so that start-up (a scenario being read, say)
	// ends cleanly on them too. After the first, the default action is
	// back: a second SIGINT or SIGTERM ends a process that does not stop.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	context.AfterFunc(ctx, stop)
	code := run(context.WithValue(ctx, wholeProcess{}, true), os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// usageError is bad input found at start-up: exit 2 with its one sentence.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// run runs one command until it ends or ctx is done, and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
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
		err = runAgent(ctx, args, stderr)
	case "replay":
		err = runReplay(ctx, args, stdout, stderr)
	case "report":
		err = runReport(ctx, args, stdout, stderr)
	case "version":
		if len(args) > 0 {
			err = usagef("unexpected argument %q: version takes none", args[0])
			break
		}
		fmt.Fprintln(stdout, versionString())
	case "help":
		fmt.Fprint(stdout, topUsage)
	default:
		err = usagef("unknown command %q; the commands are agent, replay, report and version", cmd)
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
		fmt.Fprintf(stderr, "gpuxray %s: %s\n", cmd, oneLine(ue.err.Error()))
		return exitUsage
	default:
		fmt.Fprintf(stderr, "gpuxray %s: %v\n", cmd, err)
		return 1
	}
}

const topUsage = `gpuxray: where the GPU time you own goes, and whose it is.

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
