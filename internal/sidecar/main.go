package sidecar

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/vacate-dev/vacate/pkg/hookauth"
)

// DefaultConfigPath is where the configuration is read from by default: a
// ConfigMap mounted at /etc/vacate-hook.
const DefaultConfigPath = "/etc/vacate-hook/config.yaml"

const usage = `vacate-hook serves vacate's HTTP evacuation protocol beside an app and runs
the commands of its configuration to carry a drain out (docs/recipes).

  vacate-hook [--config FILE] [--listen ADDR] [--metrics-listen ADDR]
                                                serve (the sidecar)
  vacate-hook check [--config FILE]             check a configuration, and exit
  vacate-hook install DIR                       copy this program to DIR/vacate-hook
                                                (an init container's job)
`

// Main is vacate-hook's command line: it returns the exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "check":
			return check(args[1:], stdout, stderr)
		case "install":
			return install(args[1:], stdout, stderr)
		case "help", "-h", "--help":
			fmt.Fprint(stdout, usage)
			return 0
		}
	}
	fs := flag.NewFlagSet("vacate-hook", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	config := fs.String("config", DefaultConfigPath, "the configuration file")
	listen := fs.String("listen", "", "the address to serve on, instead of the configuration's listen")
	metricsListen := fs.String("metrics-listen", "", "the address to serve /metrics on, instead of the configuration's metricsListen")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "vacate-hook: unexpected argument %q\n%s", fs.Arg(0), usage)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	cfg, err := LoadConfig(*config)
	if err == nil && *listen != "" {
		if err = checkListen(*listen); err != nil {
			err = fmt.Errorf("--listen: %w", err)
		}
		cfg.Listen = *listen
	}
	if err == nil && *metricsListen != "" {
		if err = checkMetricsListen(*metricsListen, cfg.Listen); err != nil {
			err = fmt.Errorf("--metrics-listen: %w", err)
		}
		cfg.MetricsListen = *metricsListen
	}
	id := identityFromEnv()
	var verifier *hookauth.Verifier
	if err == nil {
		verifier, err = cfg.Auth.verifier(id.uid, log)
	}
	if err == nil && id.node == "" && !cfg.Auth.Disabled {
		err = fmt.Errorf("%s is not set: give the pod's node from the downward API (env %s, fieldRef spec.nodeName), so that a drain of another node is refused", EnvNodeName, EnvNodeName)
	}
	if err != nil {
		fmt.Fprintf(stderr, "vacate-hook: %v\n", err)
		return 2
	}
	s, err := New(cfg, Options{Log: log, Verifier: verifier, Node: id.node})
	if err != nil {
		fmt.Fprintf(stderr, "vacate-hook: %v\n", err)
		return 2
	}
	l, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		fmt.Fprintf(stderr, "vacate-hook: listen: %v\n", err)
		return 1
	}
	var ml net.Listener
	if cfg.MetricsListen != "" {
		if ml, err = net.Listen("tcp", cfg.MetricsListen); err != nil {
			l.Close()
			fmt.Fprintf(stderr, "vacate-hook: listen for metrics: %v\n", err)
			return 1
		}
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
	defer stop()
	if ml != nil {
		log.Info("serving metrics", "address", ml.Addr().String(), "path", "/metrics")
		go func() {
			// The protocol goes on without its metrics.
			if err := s.ServeMetrics(ctx, ml); err != nil {
				log.Error("metrics stopped", "err", err)
			}
		}()
	}
	s.Start(ctx)
	log.Info("serving the evacuation protocol", "address", l.Addr().String(), "path", cfg.Path, "stateDir", cfg.StateDir,
		"node", id.node, "pod", id.uid, "callersChecked", verifier != nil)
	if err := s.Serve(ctx, l); err != nil {
		log.Error("stopped", "err", err)
		return 1
	}
	log.Info("stopped; each drain's state stays for the next start")
	return 0
}

func check(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("vacate-hook check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	config := fs.String("config", DefaultConfigPath, "the configuration file")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if _, err := LoadConfig(*config); err != nil {
		fmt.Fprintf(stderr, "vacate-hook: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s: ok\n", *config)
	return 0
}

// install copies this program into a directory, for an init container to
// put it where the app's image can run it.
func install(args []string, stdout, stderr io.Writer) int {
	if len(args) != 1 || args[0] == "" {
		fmt.Fprint(stderr, "vacate-hook install: want one argument, the directory to copy vacate-hook into\n")
		return 2
	}
	self, err := os.Executable()
	if err == nil {
		err = copyExecutable(self, filepath.Join(args[0], "vacate-hook"))
	}
	if err != nil {
		fmt.Fprintf(stderr, "vacate-hook install: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "installed %s\n", filepath.Join(args[0], "vacate-hook"))
	return 0
}

// copyExecutable copies a file to dst through a temporary file renamed
// over it, with mode 0755.
func copyExecutable(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.CreateTemp(filepath.Dir(dst), ".vacate-hook-*")
	if err != nil {
		return err
	}
	tmp := out.Name()
	_, cerr := io.Copy(out, in)
	merr := out.Chmod(0o755)
	serr := out.Sync()
	if err := errors.Join(cerr, merr, serr, out.Close()); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, dst); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}
