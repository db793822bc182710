package exporter

import (
	"math"
	"os"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
)

func gatherFamilies(t *testing.T, c prometheus.Collector) map[string]*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

func familyValue(mf *dto.MetricFamily) float64 {
	m := mf.GetMetric()[0]
	if mf.GetType() == dto.MetricType_COUNTER {
		return m.GetCounter().GetValue()
	}
	return m.GetGauge().GetValue()
}

// TestProcessCollectorMatchesClientGolang: our process collector exports
// client_golang's series, with the same help and types, and values that
// agree (within what changes between the two reads).
func TestProcessCollectorMatchesClientGolang(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no procfs")
	}
	ours := gatherFamilies(t, NewProcessCollector())
	theirs := gatherFamilies(t, collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if len(ours) != 9 {
		t.Errorf("%d process series, want 9", len(ours))
	}
	for name, want := range theirs {
		got, ok := ours[name]
		if !ok {
			t.Errorf("no %s", name)
			continue
		}
		if got.GetHelp() != want.GetHelp() || got.GetType() != want.GetType() || len(got.GetMetric()) != 1 || len(got.GetMetric()[0].GetLabel()) != 0 {
			t.Errorf("%s: %s %q, %d series; want %s %q, one series without labels", name, got.GetType(), got.GetHelp(), len(got.GetMetric()), want.GetType(), want.GetHelp())
			continue
		}
		g, w := familyValue(got), familyValue(want)
		// How far apart two reads a moment apart may be.
		tolerance := map[string]float64{
			"process_cpu_seconds_total":            0.5,
			"process_open_fds":                     4,
			"process_virtual_memory_bytes":         0.2 * w,
			"process_resident_memory_bytes":        0.2 * w,
			"process_start_time_seconds":           1,
			"process_network_receive_bytes_total":  1 << 20,
			"process_network_transmit_bytes_total": 1 << 20,
			"process_max_fds":                      0,
			"process_virtual_memory_max_bytes":     0,
		}[name]
		if math.Abs(g-w) > tolerance {
			t.Errorf("%s = %g, client_golang's %g", name, g, w)
		}
	}
	for name := range ours {
		if _, ok := theirs[name]; !ok {
			t.Errorf("%s is not one of client_golang's process series", name)
		}
	}
}

func TestProcessCollectorLint(t *testing.T) {
	t.Parallel()
	problems, err := testutil.CollectAndLint(NewProcessCollector())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

func TestParseStat(t *testing.T) {
	t.Parallel()
	const rest = " S 1 2 3 0 -1 4194560 100 0 0 0 1234 567 0 0 20 0 12 0 98765 1319374848 4321 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n"
	for _, comm := range []string{"(gpuxray)", "(a) b (c)", "()", "(x y z)"} {
		st, err := parseStat([]byte("4242 " + comm + rest))
		if err != nil {
			t.Errorf("%s: %v", comm, err)
			continue
		}
		if want := (procStat{utime: 1234, stime: 567, startTicks: 98765, vsize: 1319374848, rss: 4321}); st != want {
			t.Errorf("%s: %+v, want %+v", comm, st, want)
		}
	}
	negative := "1 (x) S 1 2 3 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0 5 100 -3 0\n"
	if st, err := parseStat([]byte(negative)); err != nil || st.rss != 0 {
		t.Errorf("negative rss: %+v, %v; want 0", st, err)
	}
	for _, bad := range []string{"", "1 (x", "1 (x) S 1 2 3", "1 (x) S 1 2 3 0 -1 0 0 0 0 0 a 2 0 0 20 0 1 0 5 100 3 0"} {
		if st, err := parseStat([]byte(bad)); err == nil {
			t.Errorf("parseStat(%q) = %+v, want an error", bad, st)
		}
	}
}

func TestParseNetstat(t *testing.T) {
	t.Parallel()
	good := "TcpExt: SyncookiesSent InOctets\nTcpExt: 1 2\n" +
		"IpExt: InNoRoutes InTruncatedPkts InMcastPkts OutMcastPkts InBcastPkts OutBcastPkts InOctets OutOctets\n" +
		"IpExt: 0 0 0 0 0 0 123456789 987654\n" +
		"MPTcpExt: MPCapableSYNRX\nMPTcpExt: 0\n"
	in, out, err := parseNetstat([]byte(good))
	if err != nil || in != 123456789 || out != 987654 {
		t.Errorf("parseNetstat = %g, %g, %v; want 123456789, 987654", in, out, err)
	}
	for _, bad := range []string{
		"",
		"TcpExt: InOctets OutOctets\nTcpExt: 1 2\n",
		"IpExt: InOctets OutOctets\n",
		"IpExt: InOctets OutOctets\nIpExt: 1\n",
		"IpExt: InOctets\nIpExt: 1\n",
		"IpExt: InOctets OutOctets\nIpExt: 1 x\n",
	} {
		if in, out, err := parseNetstat([]byte(bad)); err == nil {
			t.Errorf("parseNetstat(%q) = %g, %g, want an error", bad, in, out)
		}
	}
}

// BenchmarkProcessCollector gathers the process series with ours and with
// client_golang's collector.
func BenchmarkProcessCollector(b *testing.B) {
	for name, c := range map[string]prometheus.Collector{
		"gpuxray":       NewProcessCollector(),
		"client_golang": collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	} {
		b.Run(name, func(b *testing.B) {
			reg := prometheus.NewRegistry()
			reg.MustRegister(c)
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if _, err := reg.Gather(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
