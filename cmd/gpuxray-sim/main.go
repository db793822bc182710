// Command gpuxray-sim is gpuxray with a simulated node: the same commands
// and flags as cmd/gpuxray, plus `agent --simulate [FILE]`, which serves a
// scenario (or the embedded demo) in real time, and `replay FILE`, which
// plays one on a virtual clock as fast as the CPU allows. make demo runs
// it; the container image's binary (cmd/gpuxray) links none of it.
//
//	gpuxray-sim agent --simulate [FILE]  run the agent on a simulated node
//	gpuxray-sim replay [flags] FILE      replay a scenario, print the final metrics
package main

import (
	"context"
	"io"
	"os"

	"github.com/gpuxray/gpuxray/internal/app"
)

// version and revision are stamped by the build, as cmd/gpuxray's.
var version, revision string

// simulator is collector/sim's node behind app.Simulator.
type simulator struct{}

func binary() app.Binary {
	return app.Binary{Version: version, Revision: revision, Simulator: simulator{}}
}

func main() { os.Exit(binary().Main()) }

// run runs one command line of this binary, as main does, on ctx.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return binary().Run(ctx, args, stdout, stderr)
}
