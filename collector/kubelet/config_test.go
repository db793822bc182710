package kubelet_test

import (
	"strings"
	"testing"
	"time"

	"github.com/gpuxray/gpuxray/collector/kubelet"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mutate func(*kubelet.Config)
		want   []string // substrings of the error, one per problem; none means valid
	}{
		{"default", func(*kubelet.Config) {}, nil},
		{"extra names", func(c *kubelet.Config) { c.ResourceNames = []string{"example.com/vgpu"} }, nil},
		{"empty socket", func(c *kubelet.Config) { c.Socket = "" }, []string{"socket path is empty"}},
		{"relative socket", func(c *kubelet.Config) { c.Socket = "kubelet.sock" }, []string{`"kubelet.sock" is not absolute`}},
		{"zero timeout", func(c *kubelet.Config) { c.Timeout = 0 }, []string{"timeout must be positive, not 0s"}},
		{"negative receive limit", func(c *kubelet.Config) { c.MaxRecvBytes = -1 }, []string{"receive limit must be positive, not -1 bytes"}},
		{"empty resource name", func(c *kubelet.Config) { c.ResourceNames = []string{"a.com/x", " "} }, []string{"resource name 2 is empty"}},
		{"everything wrong", func(c *kubelet.Config) { *c = kubelet.Config{} }, []string{
			"socket path is empty", "timeout must be positive", "receive limit must be positive",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := kubelet.DefaultConfig()
			tt.mutate(&cfg)
			err := cfg.Validate()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want %q", tt.want)
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != len(tt.want) {
				t.Errorf("Validate() = %q, want %d problems", err, len(tt.want))
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %q, want it to say %q", err, w)
				}
			}
		})
	}
}

func TestDefaultConfig(t *testing.T) {
	t.Parallel()
	cfg := kubelet.DefaultConfig()
	if cfg.Socket != "/var/lib/kubelet/pod-resources/kubelet.sock" || cfg.Timeout != 5*time.Second ||
		cfg.MaxRecvBytes != 16<<20 || len(cfg.ResourceNames) != 0 || cfg.Clock != nil {
		t.Errorf("DefaultConfig() = %+v", cfg)
	}
}
