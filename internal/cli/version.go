package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/utils/clock"
	"sigs.k8s.io/yaml"

	"github.com/vacate-dev/vacate/internal/leader"
	"github.com/vacate-dev/vacate/internal/version"
)

// controllerLease is what a vacate-controller's leader Lease says: who
// holds it, which build, and whether the holder renewed it in time.
type controllerLease struct {
	Lease   string `json:"lease"`
	Holder  string `json:"holder,omitempty"`
	Version string `json:"version,omitempty"`
	// Held: a holder renewed it less than its lease duration ago, so a
	// controller acts on drains.
	Held    bool       `json:"held"`
	Renewed *time.Time `json:"renewed,omitempty"`
	// EvictionRequests says whether the holder coordinates Kubernetes'
	// EvictionRequest API (coordinating, off, not-served); "" from a
	// controller that does not say.
	EvictionRequests string `json:"evictionRequests,omitempty"`
}

// versionReport is what `vacate version -o json|yaml` prints.
type versionReport struct {
	Client      version.Info      `json:"client"`
	Controllers []controllerLease `json:"controllers,omitempty"`
	// Error says why the cluster's controllers are not listed.
	Error string `json:"error,omitempty"`
}

func newVersionCommand(flags *genericclioptions.ConfigFlags, s Streams, clk clock.PassiveClock) *cobra.Command {
	var clientOnly bool
	var output string
	cmd := &cobra.Command{
		Use:   "version [--client] [-o json|yaml]",
		Short: "Print the version of this vacate and of the controller that acts on drains",
		Long: `Prints this vacate's version, commit and build date, and, unless --client, the
version of the vacate-controller that holds the leader Lease: the leader writes
its version on the Lease (label app.kubernetes.io/version) each time it takes
it, and whether it coordinates Kubernetes' EvictionRequest API (label
vacate.dev/eviction-requests). Warns when the two are of different minor
versions, and when no controller holds the Lease (nothing acts on drains).`,
		Example: `  vacate version
  vacate version --client -o json`,
		Args: NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "" && output != "json" && output != "yaml" {
				return argsError{fmt.Sprintf("--output %q: choose json or yaml", output)}
			}
			r := versionReport{Client: clientVersion()}
			var err error
			if !clientOnly {
				r.Controllers, err = readControllers(cmd.Context(), flags, clk.Now())
				if err != nil {
					r.Error = err.Error()
				}
			}
			if output != "" {
				return printStructured(s, output, r)
			}
			fmt.Fprintf(s.Out, "vacate:     %s\n", r.Client)
			if !clientOnly && err == nil {
				for _, c := range r.Controllers {
					fmt.Fprintf(s.Out, "controller: %s\n", c.describe(clk.Now()))
				}
				if len(r.Controllers) == 0 {
					fmt.Fprintln(s.Out, "controller: none found (no Lease labelled "+leader.LabelName+"="+leader.ControllerName+"): is vacate installed?")
				}
				warnAboutControllers(s, r.Client.Version, r.Controllers)
			}
			return err
		},
	}
	cmd.Flags().BoolVar(&clientOnly, "client", false, "print only this vacate's version; do not contact the cluster")
	cmd.Flags().StringVarP(&output, "output", "o", "", "json or yaml")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"json", "yaml"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// printStructured prints v as JSON or YAML.
func printStructured(s Streams, format string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if format == "yaml" {
		if b, err = yaml.JSONToYAML(b); err != nil {
			return err
		}
	} else {
		b = append(b, '\n')
	}
	_, err = s.Out.Write(b)
	return err
}

// readControllers connects and lists the controllers' Leases.
func readControllers(ctx context.Context, flags *genericclioptions.ConfigFlags, now time.Time) ([]controllerLease, error) {
	s, err := dial(flags)
	if err != nil {
		return nil, err
	}
	return s.controllers(ctx, now)
}

// controllers lists the Leases vacate-controllers elect their leader on:
// those labelled as theirs in every namespace, else (a person may read
// only some namespaces, or a controller older than the label holds it)
// the default Lease vacate-system/vacate-controller.
func (s *session) controllers(ctx context.Context, now time.Time) ([]controllerLease, error) {
	leases := s.clientset.CoordinationV1().Leases
	list, err := leases(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(labels.Set{leader.LabelName: leader.ControllerName}).String()})
	var found []coordinationv1.Lease
	switch {
	case err == nil:
		found = list.Items
	case !apierrors.IsForbidden(err):
		return nil, s.explain(err, "listing the controllers' Leases")
	}
	if len(found) == 0 {
		l, err := leases(leader.DefaultLeaseNamespace).Get(ctx, leader.DefaultLeaseName, metav1.GetOptions{})
		switch {
		case err == nil:
			found = append(found, *l)
		case !apierrors.IsNotFound(err):
			return nil, s.explain(err, "reading the Lease "+leader.DefaultLeaseNamespace+"/"+leader.DefaultLeaseName)
		}
	}
	out := make([]controllerLease, 0, len(found))
	for _, l := range found {
		out = append(out, leaseOf(&l, now))
	}
	return out, nil
}

// leaseOf reads a controller's Lease at time now.
func leaseOf(l *coordinationv1.Lease, now time.Time) controllerLease {
	c := controllerLease{Lease: l.Namespace + "/" + l.Name, Version: l.Labels[leader.LabelVersion], EvictionRequests: l.Labels[leader.LabelEvictionRequests]}
	if h := l.Spec.HolderIdentity; h != nil {
		c.Holder = *h
	}
	if r := l.Spec.RenewTime; r != nil {
		t := r.Time
		c.Renewed = &t
		if d := l.Spec.LeaseDurationSeconds; d != nil && c.Holder != "" {
			c.Held = now.Before(t.Add(time.Duration(*d) * time.Second))
		}
	}
	return c
}

// describe is the lease's line in `vacate version`.
func (c controllerLease) describe(now time.Time) string {
	v := c.Version
	if v == "" {
		v = "version unknown (the Lease has no " + leader.LabelVersion + " label: a controller built before Leases carried it)"
	}
	renewed := ""
	if c.Renewed != nil {
		renewed = ", renewed " + duration.HumanDuration(now.Sub(*c.Renewed)) + " ago"
	}
	if !c.Held {
		return fmt.Sprintf("none running: no one holds the Lease %s%s (last: %s, %s)", c.Lease, renewed, orNone(c.Holder), v)
	}
	return fmt.Sprintf("%s, leader %s (Lease %s%s)%s", v, c.Holder, c.Lease, renewed, c.evictionRequests())
}

// evictionRequests says, for `vacate version`, whether the leader
// coordinates Kubernetes' EvictionRequest API.
func (c controllerLease) evictionRequests() string {
	switch c.EvictionRequests {
	case leader.EvictionRequestsCoordinating:
		return "; coordinates EvictionRequests (lifecycle.k8s.io/v1alpha1); drains request through them"
	case leader.EvictionRequestsRequesting:
		return "; EvictionRequests: drains request through them, another coordinator owns them (--eviction-requests=request-only)"
	case leader.EvictionRequestsOff:
		return "; EvictionRequests: off (--eviction-requests=off: drains evict every pod themselves)"
	case leader.EvictionRequestsNotServed:
		return "; EvictionRequests: not served by the API server (feature gate EvictionRequestAPI off)"
	}
	return ""
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// warnAboutControllers warns, on the error stream, when no controller
// holds its Lease (nothing acts on drains) and when the leader's minor
// version is not this CLI's.
func warnAboutControllers(s Streams, mine string, cs []controllerLease) {
	held := 0
	for _, c := range cs {
		if !c.Held {
			continue
		}
		held++
		if w := version.Skew(mine, c.Version); w != "" {
			fmt.Fprintf(s.Err, "Warning: %s\n", w)
		}
	}
	switch {
	case len(cs) > 0 && held == 0:
		var names []string
		for _, c := range cs {
			names = append(names, c.Lease)
		}
		fmt.Fprintf(s.Err, "Warning: no vacate-controller is running (no one holds the Lease %s): drains are recorded but nothing acts on them until one runs; see 'kubectl --namespace %s get pods'\n",
			strings.Join(names, ", "), strings.Split(names[0], "/")[0])
	case held > 1:
		fmt.Fprintf(s.Err, "Warning: %d vacate-controllers lead at once, on different Leases: vacate is installed more than once in this cluster\n", held)
	}
}

// checkControllers warns, before a command that asks the controller to
// act, when none runs or it is of another minor version. It never fails
// the command: a person who cannot read Leases is only not warned.
func checkControllers(ctx context.Context, s *session, streams Streams, now time.Time) {
	cs, err := s.controllers(ctx, now)
	if err != nil || len(cs) == 0 {
		return
	}
	warnAboutControllers(streams, clientVersion().Version, cs)
}

// clientVersion is this binary's build; a test sets another.
var clientVersion = version.Get
