package proc

import (
	"fmt"
	"path/filepath"
)

// Config configures a Reader.
type Config struct {
	// Root is the host's proc filesystem: /proc with hostPID, or where the
	// host's /proc is mounted (e.g. /host/proc).
	Root string
}

// DefaultConfig returns the configuration of an agent running with hostPID.
func DefaultConfig() Config {
	return Config{Root: "/proc"}
}

// Validate reports the problem of c in one sentence, or nil.
func (c Config) Validate() error {
	switch {
	case c.Root == "":
		return fmt.Errorf("the proc root is empty")
	case !filepath.IsAbs(c.Root):
		return fmt.Errorf("the proc root %q is not absolute", c.Root)
	}
	return nil
}
