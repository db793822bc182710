// Command fleet runs gpuxray as a fleet on VictoriaMetrics and prints truth
// against what the engine answers (`make fleet NODES=N`; docs/fleet.md). It
// exits 1 when a figure is off by more than 1%, 2 when it cannot run.
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

	"github.com/gpuxray/gpuxray/test/fleet"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("fleet", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := fleet.DefaultConfig(40)
	fs.IntVar(&c.Nodes, "nodes", c.Nodes, "simulated nodes of 8 GPUs")
	fs.Uint64Var(&c.Seed, "seed", c.Seed, "the fleet's seed: the same seed, the same scenarios")
	fs.IntVar(&c.HistoryDays, "history.days", c.HistoryDays, "days of history replayed and read back by gpuxray report")
	fs.IntVar(&c.Distinct, "history.distinct", c.Distinct, "nodes of the history replayed; the others import a copy of one of those under their own name")
	fs.IntVar(&c.HistoryParallel, "history.parallel", c.HistoryParallel, "replays at once")
	fs.DurationVar(&c.HistoryPoll, "history.poll", c.HistoryPoll, "the replayed agents' --poll.interval: at most 20s; replay CPU time is about proportional to polls")
	fs.IntVar(&c.CompareNodes, "engines.nodes", c.CompareNodes, "nodes of the history set in both VictoriaMetrics and Prometheus (0: no comparison)")
	fs.DurationVar(&c.Scrape, "live.scrape", c.Scrape, "the vmagent shards' scrape interval (15s past 250 nodes)")
	fs.DurationVar(&c.Poll, "live.poll", c.Poll, "the live agents' --poll.interval (5s past 250 nodes)")
	gpuxray := fs.String("gpuxray", "bin/gpuxray-sim", "the gpuxray-sim binary, whose replay writes the history (make build)")
	fs.StringVar(&c.Dir, "dir", "", "directory for the run's engine data and logs (a temporary one when empty)")
	fs.BoolVar(&c.Keep, "keep", false, "keep the run's directory")
	quiet := fs.Bool("quiet", false, "no progress lines")
	// A bad flag is one sentence (the flag package's own); -help lists them.
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stderr, "Usage: fleet [flags] (make fleet NODES=N; docs/fleet.md)\n\nFlags:\n")
			fs.PrintDefaults()
			return 0
		}
		return 2
	}
	// The live poll and scrape follow the fleet's size (DefaultConfig)
	// unless given.
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	d := fleet.DefaultConfig(c.Nodes)
	c.Eval, c.LiveTimeout, c.HistoryAfterLive = d.Eval, d.LiveTimeout, d.HistoryAfterLive
	if !set["live.poll"] {
		c.Poll = d.Poll
	}
	if !set["live.scrape"] {
		c.Scrape = d.Scrape
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "fleet: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if _, err := os.Stat(*gpuxray); err != nil {
		fmt.Fprintf(stderr, "fleet: no gpuxray binary at %s (make build)\n", *gpuxray)
		return 2
	}
	tools, err := fleet.FindTools(*gpuxray)
	if err != nil {
		fmt.Fprintf(stderr, "fleet: %v\n", err)
		return 2
	}
	if !*quiet {
		c.Log = stderr
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := fleet.Run(ctx, tools, c)
	if res != nil {
		res.Write(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "fleet: %v\n", err)
		return 2
	}
	if len(res.Failed()) > 0 {
		return 1
	}
	return 0
}
