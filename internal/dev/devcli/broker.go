package devcli

import (
	"strings"

	"github.com/spf13/cobra"

	"github.com/vacate-dev/vacate/examples/broker"
	"github.com/vacate-dev/vacate/internal/cli"
)

// newDevBrokerCommand runs the reference broker (examples/broker) as a
// process of its own, for the demo: hidden, like the other demo plumbing.
func newDevBrokerCommand() *cobra.Command {
	b := &broker.Broker{}
	var listen, peers string
	cmd := &cobra.Command{
		Use:    "broker --name NAME --listen ADDR --data DIR [--peers URL,...]",
		Short:  "Run the reference message broker (used by the demo)",
		Hidden: true,
		Example: `  vacate-dev broker --name broker-0 --listen 127.64.0.2:7070 --data /tmp/broker-0 \
    --peers http://127.64.0.3:7070,http://127.64.0.4:7070`,
		Args: cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if b.Name == "" || b.Dir == "" || listen == "" {
				return cli.UsageError("--name, --listen and --data are required")
			}
			if peers != "" {
				b.Peers = strings.Split(peers, ",")
			}
			return b.Serve(cmd.Context(), listen)
		},
	}
	f := cmd.Flags()
	f.StringVar(&b.Name, "name", "", "broker name, the prefix of its message ids")
	f.StringVar(&listen, "listen", "", "address to serve on (the pod's IP and port)")
	f.StringVar(&b.Dir, "data", "", "data directory")
	f.StringVar(&peers, "peers", "", "comma-separated base URLs of the peer brokers")
	f.DurationVar(&b.ForwardDelay, "forward-delay", 0, "pause after forwarding each message (to watch it happen)")
	f.BoolVar(&b.NoSync, "no-fsync", false, "do not fsync writes")
	return cmd
}
