package app

import (
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/gpuxray/gpuxray/agent"
)

// TestPeakFlags: --peak.schedule and --peak.timezone, from the command line
// or the environment and in either order, become the engine's windows; a bad
// value is one sentence naming it.
func TestPeakFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		want    string // the schedule's String()
		wantErr string
	}{
		{"defaults", nil, nil, "Mon-Fri 09:00-18:00 UTC", ""},
		{"zone before schedule", []string{"--peak.timezone=Europe/Berlin", "--peak.schedule=Sat 10:00-14:00"}, nil, "Sat 10:00-14:00 Europe/Berlin", ""},
		{"schedule before zone", []string{"--peak.schedule=Sat 10:00-14:00", "--peak.timezone=Asia/Tokyo"}, nil, "Sat 10:00-14:00 Asia/Tokyo", ""},
		{"from the environment", nil, map[string]string{"GPUXRAY_PEAK_SCHEDULE": "Mon-Fri 22:00-06:00", "GPUXRAY_PEAK_TIMEZONE": "America/New_York"}, "Mon-Fri 22:00-06:00 America/New_York", ""},
		{"no peak", []string{"--peak.schedule=none"}, nil, "none UTC", ""},
		{"bad schedule in the environment", nil, map[string]string{"GPUXRAY_PEAK_SCHEDULE": "Mon-Fry 09:00-18:00"}, "",
			`environment variable GPUXRAY_PEAK_SCHEDULE="Mon-Fry 09:00-18:00" (--peak.schedule): peak schedule rule "Mon-Fry 09:00-18:00": "Fry" is not a day (Mon, Tue, Wed, Thu, Fri, Sat, Sun)`},
		{"bad zone", []string{"--peak.timezone=Europe/Atlantis"}, nil, "", `time zone "Europe/Atlantis" is not an IANA time zone name such as Europe/Berlin`},
		{"local zone", []string{"--peak.timezone=Local"}, nil, "", `time zone "Local": give an IANA name`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			fs.SetOutput(&strings.Builder{})
			cfg := agent.DefaultConfig()
			engineFlags(fs, &cfg)
			_, err := parseFlags(fs, tc.args, func(k string) string { return tc.env[k] })
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			s, ok := cfg.Windows.(*agent.Schedule)
			if !ok {
				t.Fatalf("windows are %T, want a *agent.Schedule", cfg.Windows)
			}
			if s.String() != tc.want {
				t.Errorf("schedule %q, want %q", s.String(), tc.want)
			}
		})
	}
}

func TestEnvironmentFlags(t *testing.T) {
	t.Parallel()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	var d float64
	var s string
	fs.Float64Var(&d, "idle.threshold", 0.05, "")
	fs.StringVar(&s, "web.listen-address", ":9471", "")
	env := map[string]string{"GPUXRAY_IDLE_THRESHOLD": "0.1", "GPUXRAY_WEB_LISTEN_ADDRESS": "127.0.0.1:1"}
	if _, err := parseFlags(fs, []string{"--web.listen-address=:2"}, func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	if d != 0.1 || s != ":2" {
		t.Errorf("threshold %g, address %q; want 0.1 from the environment and :2 from the command line", d, s)
	}
	env["GPUXRAY_IDLE_THRESHOLD"] = "lots"
	fs2 := flag.NewFlagSet("t", flag.ContinueOnError)
	fs2.Float64Var(&d, "idle.threshold", 0.05, "")
	_, err := parseFlags(fs2, nil, func(k string) string { return env[k] })
	if want := `environment variable GPUXRAY_IDLE_THRESHOLD="lots" (--idle.threshold): not a number`; err == nil || err.Error() != want {
		t.Errorf("bad environment value: %v, want %s", err, want)
	}
	env["GPUXRAY_POLL_INTERVAL"] = "5"
	fs3 := flag.NewFlagSet("t", flag.ContinueOnError)
	var p time.Duration
	fs3.DurationVar(&p, "poll.interval", time.Second, "")
	_, err = parseFlags(fs3, nil, func(k string) string { return env[k] })
	if want := `environment variable GPUXRAY_POLL_INTERVAL="5" (--poll.interval): not a duration such as 30s, 500ms or 2m`; err == nil || err.Error() != want {
		t.Errorf("bad environment duration: %v, want %s", err, want)
	}
}

// TestFlagsAfterArguments: flags may follow the scenario FILE, as they may
// precede it; "--" ends the flags.
func TestFlagsAfterArguments(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args     []string
		wantArgs []string
		format   string
	}{
		{[]string{"--format=openmetrics", "x.yaml"}, []string{"x.yaml"}, "openmetrics"},
		{[]string{"x.yaml", "--format=openmetrics"}, []string{"x.yaml"}, "openmetrics"},
		{[]string{"x.yaml", "--format", "openmetrics", "y.yaml"}, []string{"x.yaml", "y.yaml"}, "openmetrics"},
		{[]string{"x.yaml", "--", "--format=openmetrics"}, []string{"x.yaml", "--format=openmetrics"}, "text"},
		{[]string{"-", "--format=openmetrics"}, []string{"-"}, "openmetrics"},
	}
	for _, tc := range tests {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		format := fs.String("format", "text", "")
		args, err := parseFlags(fs, tc.args, func(string) string { return "" })
		if err != nil || strings.Join(args, " ") != strings.Join(tc.wantArgs, " ") || *format != tc.format {
			t.Errorf("parseFlags(%q) = %q, %v, format %q; want %q, format %q", tc.args, args, err, *format, tc.wantArgs, tc.format)
		}
	}
}
