// Command gen writes the benchmark scenarios of test/bench/scenario into
// test/bench: go run ./test/bench/gen (from the repository root).
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/gpuxray/gpuxray/test/bench/scenario"
)

func main() {
	dir := "test/bench"
	if len(os.Args) > 1 {
		dir = os.Args[1]
	}
	for name, gen := range scenario.Files() {
		if err := os.WriteFile(filepath.Join(dir, name), gen(), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}
