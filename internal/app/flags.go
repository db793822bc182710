package app

import (
	"errors"
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

// parseFlags parses args, flags and arguments in any order ("--" ends the
// flags), then fills every flag not given on the command line from its
// environment variable, and returns the arguments. Errors are usage errors
// of one sentence, with no usage dump; -h prints the usage and returns
// flag.ErrHelp.
func parseFlags(fs *flag.FlagSet, args []string, getenv func(string) string) ([]string, error) {
	var failed *setError
	fs.VisitAll(func(f *flag.Flag) {
		f.Usage = fmt.Sprintf("%s [$%s]", f.Usage, envName(f.Name))
		f.Value = &explainedValue{Value: f.Value, name: f.Name, failed: &failed}
	})
	positional, err := parseEnv(fs, args, getenv, &failed)
	// The usage names each flag's type from its own Value.
	fs.VisitAll(func(f *flag.Flag) { f.Value = f.Value.(*explainedValue).Value })
	if errors.Is(err, flag.ErrHelp) {
		fs.Usage()
	}
	return positional, err
}

func parseEnv(fs *flag.FlagSet, args []string, getenv func(string) string, failed **setError) ([]string, error) {
	out := fs.Output()
	fs.SetOutput(io.Discard) // the flag package prints the usage after every error
	positional, err := parseArgs(fs, args)
	fs.SetOutput(out)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return nil, err
	case err != nil && *failed != nil:
		return nil, usagef("--%s %q: %v", (*failed).name, (*failed).value, (*failed).err)
	case err != nil && strings.HasPrefix(err.Error(), "flag provided but not defined"):
		return nil, usagef("%v (%q lists the flags)", err, fs.Name()+" -h")
	case err != nil:
		return nil, usageError{err}
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || set[f.Name] {
			return
		}
		if v, ok := lookup(getenv, envName(f.Name)); ok {
			if e := fs.Set(f.Name, v); e != nil {
				err = usagef("environment variable %s=%q (--%s): %v", envName(f.Name), v, f.Name, e)
			}
		}
	})
	return positional, err
}

// parseArgs parses the flags among args, wherever they are, and returns
// the other arguments: the flag package stops at the first argument that
// is not a flag, so that "replay FILE --format=openmetrics" would take the
// flag for a second FILE.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, nil
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(positional, rest...), nil
		}
		positional, args = append(positional, rest[0]), rest[1:]
	}
}

// setError is a flag value that did not parse.
type setError struct {
	name, value string
	err         error
}

// explainedValue is a flag's Value while it is parsed: the flag package
// says "parse error" for any bad number or duration, and this says what
// was wanted, and records the failure for parseFlags's one sentence.
type explainedValue struct {
	flag.Value
	name   string
	failed **setError
}

func (v *explainedValue) Set(s string) error {
	err := v.Value.Set(s)
	if err == nil {
		return nil
	}
	if g, ok := v.Value.(flag.Getter); ok {
		switch g.Get().(type) {
		case time.Duration:
			err = errors.New("not a duration such as 30s, 500ms or 2m")
		case float64:
			err = errors.New("not a number")
		case int, int64, uint, uint64:
			if strings.Contains(err.Error(), "range") {
				err = errors.New("out of range")
			} else {
				err = errors.New("not a whole number")
			}
		case bool:
			err = errors.New("not true or false")
		}
	}
	*v.failed = &setError{name: v.name, value: s, err: err}
	return err
}

// IsBoolFlag keeps a boolean flag one that takes no value.
func (v *explainedValue) IsBoolFlag() bool {
	b, ok := v.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
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
	if strings.TrimSpace(v) == "" {
		// ParseSchedule reads "" as no peak, which an unset variable in a
		// manifest would then mean by accident.
		return errors.New(`empty; give "none" for no peak hours`)
	}
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

// Validate checks the level and the format; errors are usage errors.
func (c logConfig) Validate() error {
	var lvl zapcore.Level
	if err := lvl.UnmarshalText([]byte(c.level)); err != nil {
		return usagef("--log.level %q is not one of debug, info, warn, error", c.level)
	}
	switch c.format {
	case "json", "console", "auto":
		return nil
	}
	return usagef("--log.format %q is not one of json, console, auto", c.format)
}

// newLogger builds the process's one logger of a valid c.
func newLogger(c logConfig, w io.Writer) (*zap.Logger, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	var lvl zapcore.Level
	_ = lvl.UnmarshalText([]byte(c.level)) // checked by Validate
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
	fs.StringVar(&cfg.IdleSource, "idle.source", cfg.IdleSource, "activity source that decides idleness on whole GPUs that have both: samples (NVML utilization samples) or gpm (GPM GRAPHICS_UTIL, the time an app was active; Hopper and newer)")
	fs.DurationVar(&cfg.CallTimeout, "nvml.timeout", cfg.CallTimeout, "how long a poll waits for one GPU's NVML calls; a GPU whose calls hang longer is reported down until they return")
}
