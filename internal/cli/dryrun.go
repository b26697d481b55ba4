package cli

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/pflag"
)

// dryRun is --dry-run, as kubectl's: none (the default: do it), client
// (say what would be done, asking the API server nothing that changes
// anything) or server (send the changes as server-side dry runs: RBAC,
// validation and admission policies answer, nothing is stored). --dry-run
// alone is client.
type dryRun struct {
	value   string
	offered []string
}

// Values of --dry-run.
const (
	dryRunNone   = "none"
	dryRunClient = "client"
	dryRunServer = "server"
)

// addDryRun adds --dry-run to f, with the values offered (none always).
func addDryRun(f *pflag.FlagSet, d *dryRun, usage string, offered ...string) {
	d.value, d.offered = dryRunNone, append([]string{dryRunNone}, offered...)
	f.Var(d, "dry-run", usage)
	f.Lookup("dry-run").NoOptDefVal = dryRunClient
}

func (d *dryRun) String() string { return d.value }
func (d *dryRun) Type() string   { return "string" }

// Set takes none, client or server; true and false, kubectl's old
// values, are client and none.
func (d *dryRun) Set(v string) error {
	switch v {
	case "true":
		v = dryRunClient
	case "false":
		v = dryRunNone
	}
	if !slices.Contains(d.offered, v) {
		return fmt.Errorf("must be %s", strings.Join(d.offered, ", "))
	}
	d.value = v
	return nil
}

// any: a dry run of either kind.
func (d dryRun) any() bool    { return d.value != "" && d.value != dryRunNone }
func (d dryRun) client() bool { return d.value == dryRunClient }
func (d dryRun) server() bool { return d.value == dryRunServer }
