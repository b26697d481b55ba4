// Command broker runs the reference message broker (package
// examples/broker) on one address, with its data in one directory.
//
//	broker --name broker-0 --listen 127.64.0.2:7070 --data /var/lib/broker \
//	       --peers http://127.64.0.3:7070,http://127.64.0.4:7070
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/vacate-dev/vacate/examples/broker"
	"github.com/vacate-dev/vacate/pkg/hookauth"
)

func main() {
	b := &broker.Broker{}
	listen := flag.String("listen", "127.0.0.1:7070", "address to serve on (the pod's IP and port)")
	peers := flag.String("peers", "", "comma-separated base URLs of the peer brokers")
	flag.StringVar(&b.Name, "name", "", "broker name, the prefix of its message ids (required)")
	flag.StringVar(&b.Dir, "data", "", "data directory (required)")
	flag.DurationVar(&b.ForwardDelay, "forward-delay", 0, "pause after forwarding each message (for tests)")
	flag.BoolVar(&b.NoSync, "no-fsync", false, "do not fsync writes (survives a killed process, not a crashed machine)")
	podUID := flag.String("pod-uid", "", "serve /evacuate only to vacate-controller's tokens for this pod (its UID, from the downward API); empty serves anyone")
	keys := &hookauth.Discovery{}
	flag.StringVar(&keys.Server, "api-server", "", "with --pod-uid, out of a pod: the API server whose service-account keys are read (https://HOST:PORT)")
	flag.StringVar(&keys.CAFile, "ca-file", "", "with --api-server: its CA")
	flag.StringVar(&keys.TokenFile, "token-file", "", "with --api-server: a service-account token to read the keys with")
	flag.Parse()
	if b.Name == "" || b.Dir == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: broker --name NAME --data DIR [--listen ADDR] [--peers URL,...]")
		os.Exit(2)
	}
	if *peers != "" {
		b.Peers = strings.Split(*peers, ",")
	}
	if *podUID != "" {
		opts := hookauth.Options{Pod: *podUID}
		if keys.Server != "" {
			opts.Keys = keys
		}
		v, err := hookauth.New(opts)
		if err != nil {
			fmt.Fprintln(os.Stderr, "broker:", err)
			os.Exit(2)
		}
		b.Callers = v
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	fmt.Printf("broker %s serving on %s, data in %s, peers %v\n", b.Name, *listen, b.Dir, b.Peers)
	if err := b.Serve(ctx, *listen); err != nil {
		fmt.Fprintln(os.Stderr, "broker:", err)
		os.Exit(1)
	}
}
