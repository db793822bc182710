package app

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/gpuxray/gpuxray/agent"
	"github.com/gpuxray/gpuxray/collector/nvml"
)

// keepAll is replay's default retention: a replay reports every allocation
// of the scenario, however early it ended.
const keepAll = 100 * 365 * 24 * time.Hour

// replayPollTimeout is replay's default --poll.timeout. The replay's clock
// is virtual: a poll lasts as long as the host takes to run it, which on a
// busy machine can be seconds, and a poll that gave up on its reads would
// lose the samples the clock then moves past. The deadline is a guard.
const replayPollTimeout = time.Minute

// replayConfig is the replay command's configuration as its flags give it.
type replayConfig struct {
	engine        agent.Config
	nvml          nvml.Config
	identityFlags identityConfig
	format        string
	scrapeEvery   time.Duration
	log           logConfig
	args          []string
}

// parseReplay binds replay's flags and parses args into a configuration,
// not yet validated.
func parseReplay(args []string, stderr io.Writer) (*replayConfig, error) {
	c := &replayConfig{engine: agent.DefaultConfig(), nvml: nvml.DefaultConfig()}
	c.engine.Retention, c.engine.PollTimeout = keepAll, replayPollTimeout
	fs := flag.NewFlagSet("gpuxray replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	engineFlags(fs, &c.engine)
	readerFlags(fs, &c.nvml)
	identityFlags(fs, &c.identityFlags)
	fs.StringVar(&c.format, "format", "text", "output: text (the final metrics) or openmetrics (a scrape every --scrape.interval, with timestamps, for promtool tsdb create-blocks-from openmetrics)")
	fs.DurationVar(&c.scrapeEvery, "scrape.interval", 30*time.Second, "with --format openmetrics, the virtual time between two scrapes")
	logFlags(fs, &c.log)
	fs.Lookup("log.level").DefValue, c.log.level = "warn", "warn"
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: gpuxray replay [flags] FILE\n\nReplays the scenario FILE on a virtual clock as fast as the CPU allows, through\nthe real NVML reader, kubelet client and engine, and prints the final metrics\nin the Prometheus text format, or with --format openmetrics every scrape of\nthe replay with its timestamp (labelled job=\"gpuxray\", instance=NODE as a\nscrape would be), with the scenario's cluster series at the same scrapes (the\nsimulated kube-state-metrics and Kueue that agent --simulate serves at\n/simulate/kube-state-metrics, labelled job=\"kube-state-metrics\"), ready for\npromtool tsdb create-blocks-from openmetrics.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	positional, err := parseFlags(fs, args, os.Getenv)
	if err != nil {
		return nil, err
	}
	c.args = positional
	return c, nil
}

// Validate checks every setting, with one sentence for the first that is
// wrong: replay's only validation.
func (c *replayConfig) Validate() error {
	switch {
	case len(c.args) != 1:
		return usagef("want exactly one scenario FILE, got %d arguments", len(c.args))
	case c.format != "text" && c.format != "openmetrics":
		return usagef("--format %q is not one of text, openmetrics", c.format)
	case c.scrapeEvery < c.engine.PollInterval:
		return usagef("--scrape.interval %s is shorter than --poll.interval %s", c.scrapeEvery, c.engine.PollInterval)
	}
	for _, v := range []interface{ Validate() error }{c.engine, c.nvml} {
		if err := v.Validate(); err != nil {
			return usageError{err}
		}
	}
	if _, err := c.identityFlags.identity(); err != nil {
		return err
	}
	return c.log.Validate()
}

// runReplay is the replay command: parse, validate, and play the scenario
// on the simulator.
func (b Binary) runReplay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if b.Simulator == nil {
		return errNoSimulator("replay")
	}
	c, err := parseReplay(args, stderr)
	if err != nil {
		return err
	}
	if err := c.Validate(); err != nil {
		return err
	}
	id, _ := c.identityFlags.identity() // checked by Validate
	logger, err := newLogger(c.log, stderr)
	if err != nil {
		return err
	}
	return b.Simulator.Replay(ctx, ReplayConfig{
		Path: c.args[0], Engine: c.engine, NVML: c.nvml, Identity: id,
		DRA: DefaultDRA(), OpenMetrics: c.format == "openmetrics",
		ScrapeInterval: c.scrapeEvery, Logger: logger,
	}, stdout)
}
