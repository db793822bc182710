// Command gpuxray is the gpuxray node agent: it attributes allocated-but-idle
// GPU time to the pods that hold it and serves it to Prometheus.
//
//	gpuxray [agent] [flags]          run the agent (the default)
//	gpuxray report --prometheus URL  the capacity verdict from a range of Prometheus data
//	gpuxray version                  print the version
//
// This is the binary of the container image: it links no simulator. The
// simulated node (agent --simulate, replay) is cmd/gpuxray-sim.
package main

import (
	"os"

	"github.com/gpuxray/gpuxray/internal/app"
)

// version and revision are stamped by the build:
// -ldflags "-X main.version=1.2.3 -X main.revision=abc123".
var version, revision string

func main() {
	os.Exit(app.Binary{Version: version, Revision: revision}.Main())
}
