package exporter_test

import (
	stdgzip "compress/gzip"
	"io"
	"testing"

	kgzip "github.com/klauspost/compress/gzip"

	"github.com/gpuxray/gpuxray/test/bench/scenario"
)

// gzipWriter is what withGzip needs of a gzip writer.
type gzipWriter interface {
	io.WriteCloser
	Reset(io.Writer)
}

type countingWriter struct{ n int }

func (c *countingWriter) Write(p []byte) (int, error) { c.n += len(p); return len(p), nil }

// BenchmarkGzipBestSpeed compresses a node-110 text scrape at BestSpeed
// with compress/gzip and with klauspost/compress's gzip (what withGzip
// uses), writer reused as withGzip's pool does.
func BenchmarkGzipBestSpeed(b *testing.B) {
	n := scrapeNode(b, scenario.Node110(), "node-110.yaml")
	body := scrapeBody(b, handler(agentRegistry(n)), "identity")
	std, _ := stdgzip.NewWriterLevel(io.Discard, stdgzip.BestSpeed)
	kp, _ := kgzip.NewWriterLevel(io.Discard, kgzip.BestSpeed)
	for _, impl := range []struct {
		name string
		w    gzipWriter
	}{{"compress-gzip", std}, {"klauspost", kp}} {
		b.Run("impl="+impl.name, func(b *testing.B) {
			var out countingWriter
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				out.n = 0
				impl.w.Reset(&out)
				if _, err := impl.w.Write(body); err != nil {
					b.Fatal(err)
				}
				if err := impl.w.Close(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(out.n), "gzip-bytes")
		})
	}
}
