//go:build !nosim

package main

import (
	"flag"
	"strings"
	"testing"

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
