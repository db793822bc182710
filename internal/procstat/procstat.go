// Package procstat reads the /proc/<pid>/stat lines that both the agent's
// process attribution (collector/proc) and its own process metrics
// (exporter) parse.
package procstat

import (
	"bytes"
	"errors"
)

// AfterComm returns what of a /proc/<pid>/stat line follows field 2, comm:
// fields 3 (state) onwards, separated by spaces. comm is in parentheses and
// may itself hold spaces and parentheses, so it ends at the last ')'.
func AfterComm(stat []byte) ([]byte, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return nil, errors.New("stat: no ')' after comm")
	}
	return stat[i+1:], nil
}
