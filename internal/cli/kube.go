package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"

	"github.com/spf13/pflag"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/api/v1alpha1"
)

// newConfigFlags are kubectl's global connection flags, as kubectl builds
// them (--kubeconfig, --context, --user, --server, --request-timeout,
// -n/--namespace, --cache-dir, --username/--password, ...): people type
// them by habit, and a flag kubectl accepts is no usage error here. Every
// object vacate reads or writes by name (NodeDrains, DrainPolicies,
// Evacuations, nodes) is cluster-scoped, so -n changes what vacate does
// no more than it changes 'kubectl get nodes -n x'.
func newConfigFlags() *genericclioptions.ConfigFlags {
	return genericclioptions.NewConfigFlags(true).WithDeprecatedPasswordFlag()
}

// addLogFlags adds kubectl's -v/--v and --vmodule: the verbosity of
// client-go's logs (-v=6 shows every request, -v=8 their bodies), on the
// error stream.
func addLogFlags(f *pflag.FlagSet) {
	for _, name := range []string{"v", "vmodule"} {
		f.AddGoFlag(klogFlags().Lookup(name))
	}
}

// klogFlags are klog's flags, registered once: they set klog's global
// state, which every command tree of the process shares.
var klogFlags = sync.OnceValue(func() *flag.FlagSet {
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	return fs
})

// session is a connection to a cluster that serves vacate's API.
type session struct {
	config    *rest.Config
	clientset kubernetes.Interface
	client    client.WithWatch
	// where names the cluster for messages: the context and the server.
	where string
}

// connect builds clients from the flags and checks, with one discovery
// request, that the cluster answers and serves vacate's API. The errors say
// what to do: point at the cluster, start it, or install the CRDs.
func connect(ctx context.Context, flags *genericclioptions.ConfigFlags) (*session, error) {
	s, err := dial(flags)
	if err != nil {
		return nil, err
	}
	served, err := s.servesVacate()
	switch {
	case err != nil:
		return nil, err
	case !served:
		return nil, missingCRDsError{where: s.where}
	}
	return s, nil
}

// dial builds clients from the flags, without a request.
func dial(flags *genericclioptions.ConfigFlags) (*session, error) {
	raw, err := flags.ToRawKubeConfigLoader().RawConfig()
	if err != nil {
		return nil, newNoConfigError(err)
	}
	cfg, err := flags.ToRESTConfig()
	if err != nil {
		return nil, newNoConfigError(err)
	}
	context := raw.CurrentContext
	if flags.Context != nil && *flags.Context != "" {
		context = *flags.Context
	}
	inCluster := os.Getenv("KUBERNETES_SERVICE_HOST") != ""
	if context == "" && !inCluster && (flags.APIServer == nil || *flags.APIServer == "") {
		return nil, newNoConfigError(errors.New("the kubeconfig names no current context"))
	}
	s := &session{config: cfg, where: fmt.Sprintf("the cluster at %s (context %q)", cfg.Host, context)}
	cfg.UserAgent = "vacate-cli"
	if s.clientset, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, fmt.Errorf("building a client for %s: %w", s.where, err)
	}
	// Kubernetes' kinds and vacate's; not pkg/evacuation.Scheme, whose
	// package brings a controller manager into the CLI.
	scheme, kinds := runtime.NewScheme(), runtime.NewSchemeBuilder(clientgoscheme.AddToScheme, v1alpha1.AddToScheme)
	if err := kinds.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("building the scheme: %w", err)
	}
	if s.client, err = client.NewWithWatch(cfg, client.Options{Scheme: scheme}); err != nil {
		return nil, fmt.Errorf("building a client for %s: %w", s.where, err)
	}
	return s, nil
}

// servesVacate asks, with one discovery request, whether the cluster
// answers and serves vacate's API (the CRDs are installed).
func (s *session) servesVacate() (bool, error) {
	_, err := s.clientset.Discovery().ServerResourcesForGroupVersion(v1alpha1.GroupVersion.String())
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, s.explain(err, "checking for vacate's API")
	}
	return true, nil
}

// node reads a node, with a clear error when it does not exist.
func (s *session) node(ctx context.Context, name string) (*corev1.Node, error) {
	n, err := s.clientset.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, unknownNodeError{name: name, where: s.where}
	}
	if err != nil {
		return nil, s.explain(err, "reading node "+name)
	}
	return n, nil
}

// nodeNames resolves the command's node arguments or --selector to node
// names, checking that each exists.
func (s *session) nodeNames(ctx context.Context, args []string, selector string) ([]string, error) {
	if selector == "" {
		for _, name := range args {
			if _, err := s.node(ctx, name); err != nil {
				return nil, err
			}
		}
		return dedupe(args), nil
	}
	if _, err := labels.Parse(selector); err != nil {
		return nil, usageError{fmt.Errorf("--selector %q: %w", selector, err)}
	}
	list, err := s.clientset.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, s.explain(err, "listing nodes")
	}
	if len(list.Items) == 0 {
		return nil, fmt.Errorf("no node in %s matches --selector %q; see 'kubectl get nodes --show-labels'", s.where, selector)
	}
	names := make([]string, 0, len(list.Items))
	for _, n := range list.Items {
		names = append(names, n.Name)
	}
	return names, nil
}

func dedupe(names []string) []string {
	seen := map[string]bool{}
	out := make([]string, 0, len(names))
	for _, n := range names {
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}

// invalidRequester are the characters a requester name may not hold.
var invalidRequester = regexp.MustCompile(`[^A-Za-z0-9._:@/-]`)

// whoAmI names the person (or service account) behind the credentials, as
// the API server authenticates them, for the requester entry "cli:<user>".
// Clusters without SelfSubjectReview fall back to the kubeconfig's user name.
func (s *session) whoAmI(ctx context.Context, flags *genericclioptions.ConfigFlags) (string, error) {
	user := ""
	review, err := s.clientset.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
	switch {
	case err == nil:
		user = review.Status.UserInfo.Username
	case apierrors.IsNotFound(err), apierrors.IsForbidden(err), apierrors.IsMethodNotSupported(err):
		raw, rerr := flags.ToRawKubeConfigLoader().RawConfig()
		if rerr != nil {
			return "", fmt.Errorf("reading kubeconfig: %w", rerr)
		}
		name := raw.CurrentContext
		if flags.Context != nil && *flags.Context != "" {
			name = *flags.Context
		}
		if flags.AuthInfoName != nil && *flags.AuthInfoName != "" {
			user = *flags.AuthInfoName
		} else if c, ok := raw.Contexts[name]; ok {
			user = c.AuthInfo
		}
	default:
		return "", s.explain(err, "asking the API server who you are")
	}
	if user == "" {
		user = "unknown"
	}
	name := "cli:" + strings.TrimLeft(invalidRequester.ReplaceAllString(user, "-"), "._:@/-")
	if len(name) > 253 {
		name = name[:253]
	}
	return name, nil
}

// policyExists checks a DrainPolicy named on the command line, so a typo
// is an error now rather than a drain that waits for a policy forever.
func (s *session) policyExists(ctx context.Context, name string) error {
	err := s.client.Get(ctx, types.NamespacedName{Name: name}, &v1alpha1.DrainPolicy{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("DrainPolicy %q not found in %s; see 'kubectl get drainpolicies'", name, s.where)
	}
	return s.explain(err, "reading DrainPolicy "+name)
}

// targets are the nodes a command acts on: named on the command line, or
// chosen by --selector.
type targets struct{ selector string }

// addFlag adds --selector; verb says what the command does to the nodes.
func (t *targets) addFlag(f *pflag.FlagSet, verb string) {
	f.StringVarP(&t.selector, "selector", "l", "", verb+" the nodes with these labels (kubectl label selector syntax) instead of naming them")
}

// check wants node names or --selector, not both; what is the usage hint
// ("the nodes to drain").
func (t targets) check(command, what string, args []string) error {
	switch {
	case len(args) == 0 && t.selector == "":
		return argsError{fmt.Sprintf("name %s, or pass --selector; see 'vacate %s --help'", what, command)}
	case len(args) > 0 && t.selector != "":
		return argsError{"name the nodes or pass --selector, not both"}
	}
	return nil
}

// requesterFlag is --requester: the name the user requests drains under.
type requesterFlag struct{ name string }

func (r *requesterFlag) addFlag(f *pflag.FlagSet, usage string) {
	f.StringVar(&r.name, "requester", "", usage)
}

func (r requesterFlag) check() error {
	if r.name != "" && !validRequester.MatchString(r.name) {
		return argsError{fmt.Sprintf("--requester %q: use letters, digits and . _ : @ / - (starting with a letter or digit)", r.name)}
	}
	return nil
}

// resolve is --requester, else cli:<the user the API server sees>.
func (r requesterFlag) resolve(ctx context.Context, s *session, flags *genericclioptions.ConfigFlags) (string, error) {
	if r.name != "" {
		return r.name, nil
	}
	return s.whoAmI(ctx, flags)
}
