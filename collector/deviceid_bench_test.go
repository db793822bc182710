package collector_test

import (
	"testing"

	"github.com/gpuxray/gpuxray/collector"
)

func BenchmarkParseDeviceID(b *testing.B) {
	ids := []string{
		"GPU-3b9f1e2a-7c4d-4e8f-9a1b-2c3d4e5f6a7b",
		"GPU-3b9f1e2a-7c4d-4e8f-9a1b-2c3d4e5f6a7b::3",
		"MIG-8f6c2d1e-4b3a-5c6d-7e8f-9a0b1c2d3e4f",
		"MIG-GPU-3b9f1e2a-7c4d-4e8f-9a1b-2c3d4e5f6a7b/1/0",
		"nvidia3/gi2",
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := collector.ParseDeviceID(ids[i%len(ids)]); err != nil {
			b.Fatal(err)
		}
	}
}
