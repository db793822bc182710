package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
	_ "time/tzdata" // --peak.timezone works in images without /usr/share/zoneinfo

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/gpuxray/gpuxray/agent"
	"github.com/gpuxray/gpuxray/collector/nvml"
)

// envName is the environment variable of a flag: --poll.interval is
// GPUXRAY_POLL_INTERVAL.
func envName(flagName string) string {
	return "GPUXRAY_" + strings.ToUpper(strings.NewReplacer(".", "_", "-", "_").Replace(flagName))
}

// parseFlags parses args, then fills every flag not given on the command line
// from its environment variable. Errors are usage errors.
func parseFlags(fs *flag.FlagSet, args []string, getenv func(string) string) error {
	fs.VisitAll(func(f *flag.Flag) {
		f.Usage = fmt.Sprintf("%s [$%s]", f.Usage, envName(f.Name))
	})
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || set[f.Name] {
			return
		}
		if v, ok := lookup(getenv, envName(f.Name)); ok {
			if e := fs.Set(f.Name, v); e != nil {
				err = usagef("environment variable %s=%q: %v", envName(f.Name), v, e)
			}
		}
	})
	return err
}

func lookup(getenv func(string) string, name string) (string, bool) {
	v := getenv(name)
	return v, v != ""
}

// engineFlags binds the engine's flags shared by agent and replay.
func engineFlags(fs *flag.FlagSet, cfg *agent.Config) {
	fs.DurationVar(&cfg.PollInterval, "poll.interval", cfg.PollInterval, "how often to read NVML and the kubelet")
	fs.DurationVar(&cfg.PollTimeout, "poll.timeout", cfg.PollTimeout, "deadline of one poll's source calls")
	fs.Float64Var(&cfg.IdleThreshold, "idle.threshold", cfg.IdleThreshold, "busy ratio below which a sample counts as idle")
	fs.DurationVar(&cfg.Retention, "retention", cfg.Retention, "how long an ended allocation stays exported")
	fs.DurationVar(&cfg.MaxSampleGap, "sample.max-gap", cfg.MaxSampleGap, "longest interval one utilization sample is taken to cover; longer is a gap")
	fs.IntVar(&cfg.MaxAllocations, "limits.max-allocations", cfg.MaxAllocations, "most allocation series (device × container) kept; beyond, new ones are folded into pod=\"__overflow__\" and counted")
	fs.DurationVar(&cfg.StaleGrace, "kubelet.stale-grace", cfg.StaleGrace, "how long the kubelet's last good answer keeps being credited while it cannot be read; beyond, device time is counted as unattributed")
	p := &peakFlags{cfg: cfg, spec: agent.DefaultPeakSchedule, loc: time.UTC}
	cfg.Windows = p.build()
	fs.Func("peak.schedule", `weekly peak hours on the wall clock of --peak.timezone, e.g. "Mon-Fri 08:00-12:30,13:30-19:00; Sat 10:00-14:00"; a range that ends before it starts ends the next day; "none" for no peak`, p.setSchedule)
	fs.Func("peak.timezone", "IANA time zone of --peak.schedule, e.g. Europe/Berlin", p.setZone)
	fs.Lookup("peak.schedule").DefValue = agent.DefaultPeakSchedule
	fs.Lookup("peak.timezone").DefValue = "UTC"
}

// peakFlags builds the engine's peak schedule from --peak.schedule and
// --peak.timezone, whichever is set last; each flag is checked as it is set,
// so a bad value is a usage error naming it.
type peakFlags struct {
	cfg  *agent.Config
	spec string
	loc  *time.Location
}

func (p *peakFlags) build() *agent.Schedule {
	s, err := agent.ParseSchedule(p.spec, p.loc)
	if err != nil {
		panic("default peak schedule: " + err.Error())
	}
	return s
}

func (p *peakFlags) setSchedule(v string) error {
	s, err := agent.ParseSchedule(v, p.loc)
	if err != nil {
		return err
	}
	p.spec, p.cfg.Windows = v, s
	return nil
}

func (p *peakFlags) setZone(v string) error {
	if v == "" || v == "Local" {
		return fmt.Errorf("time zone %q: give an IANA name such as UTC or Europe/Berlin", v)
	}
	loc, err := time.LoadLocation(v)
	if err != nil {
		return fmt.Errorf("time zone %q is not an IANA time zone name such as Europe/Berlin", v)
	}
	s, err := agent.ParseSchedule(p.spec, loc)
	if err != nil {
		return err
	}
	p.loc, p.cfg.Windows = loc, s
	return nil
}

type logConfig struct {
	level  string
	format string
}

func logFlags(fs *flag.FlagSet, c *logConfig) {
	fs.StringVar(&c.level, "log.level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&c.format, "log.format", "auto", "log format: json, console, or auto (console on a terminal, else json)")
}

// newLogger builds the process's one logger.
func newLogger(c logConfig, w io.Writer) (*zap.Logger, error) {
	var lvl zapcore.Level
	if err := lvl.UnmarshalText([]byte(c.level)); err != nil {
		return nil, usagef("--log.level %q is not one of debug, info, warn, error", c.level)
	}
	format := c.format
	if format == "auto" {
		format = "json"
		if f, ok := w.(*os.File); ok {
			if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
				format = "console"
			}
		}
	}
	ec := zap.NewProductionEncoderConfig()
	ec.EncodeTime = zapcore.ISO8601TimeEncoder
	var enc zapcore.Encoder
	switch format {
	case "json":
		enc = zapcore.NewJSONEncoder(ec)
	case "console":
		ec.EncodeLevel = zapcore.CapitalLevelEncoder
		enc = zapcore.NewConsoleEncoder(ec)
	default:
		return nil, usagef("--log.format %q is not one of json, console, auto", c.format)
	}
	return zap.New(zapcore.NewCore(enc, zapcore.AddSync(w), lvl)), nil
}

// readerFlags binds the NVML reader's flags shared by agent and replay.
func readerFlags(fs *flag.FlagSet, cfg *nvml.Config) {
	fs.StringVar(&cfg.IdleSource, "idle.source", cfg.IdleSource, "activity source that decides idleness on whole GPUs that have both: samples (NVML utilization samples) or gpm (SM activity, Hopper and newer)")
	fs.DurationVar(&cfg.CallTimeout, "nvml.timeout", cfg.CallTimeout, "how long a poll waits for one GPU's NVML calls; a GPU whose calls hang longer is reported down until they return")
}
