package app

import (
	"context"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReportPriceErrors: bad prices are one sentence and exit 2, before
// any query.
func TestReportPriceErrors(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(file, []byte("gpu_types: {NVIDIA-L4: {purchase_price: 3000}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		args []string
		says string
	}{
		{"no amount", []string{"--price=NVIDIA-L4"}, `--price "NVIDIA-L4": price "NVIDIA-L4" is not GPU_TYPE=AMOUNT`},
		{"negative", []string{"--price=*=-2"}, `is not an amount of at least 0`},
		{"twice", []string{"--price=NVIDIA-L4=1", "--price=NVIDIA L4=2"}, "NVIDIA-L4 is priced twice"},
		{"currency", []string{"--price=*=1", "--currency=euro"}, `--currency "euro" is not a three-letter ISO 4217 code`},
		{"file", []string{"--price.file=" + file}, "--price.file: price file " + file + ": NVIDIA-L4: a purchase_price needs amortization_years"},
		{"no file", []string{"--price.file=" + file + ".missing"}, "--price.file: price file: open"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var stdout, stderr strings.Builder
			code := run(context.Background(), append([]string{"report", "--prometheus=http://127.0.0.1:1"}, c.args...), &stdout, &stderr)
			if code != 2 || !strings.Contains(stderr.String(), c.says) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", code, stderr.String(), c.says)
			}
		})
	}
}

// TestPriceSheet: the file's prices, --price replacing a type's, the
// currency from the flag, else the file, else USD.
func TestPriceSheet(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(file, []byte("currency: EUR\ngpu_types:\n  NVIDIA-H100-80GB-HBM3: {purchase_price: 30000, amortization_years: 4}\n  NVIDIA-L4: {per_hour: 0.5}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name     string
		args     []string
		currency string
		h100     float64
		other    bool
	}{
		{"file", []string{"--price.file=" + file}, "EUR", 30000.0 / (4 * 8760), false},
		{"flag replaces", []string{"--price.file=" + file, "--price=NVIDIA-H100-80GB-HBM3=3", "--currency=GBP"}, "GBP", 3, false},
		{"flags only", []string{"--price=NVIDIA-H100-80GB-HBM3=2.5,*=1"}, "USD", 2.5, true},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		p := priceFlags(fs)
		if err := fs.Parse(c.args); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		s, err := p.sheet()
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		h, _ := s.For("NVIDIA-H100-80GB-HBM3")
		_, other := s.Types["*"]
		if s.Currency != c.currency || h.Capital() != c.h100 || other != c.other {
			t.Errorf("%s: %s, H100 %g, * %v", c.name, s.Currency, h.Capital(), other)
		}
	}
}
