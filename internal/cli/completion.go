package cli

import (
	"context"
	"regexp"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/spf13/cobra"
	"github.com/vacate-dev/vacate/api/v1alpha1"
)

// validRequester is the pattern the NodeDrain CRD enforces on requester names.
var validRequester = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:@/-]{0,252}$`)

// completeNodes completes node names from the cluster, skipping the ones
// already on the command line. Completion never fails loudly: without a
// cluster it offers nothing.
func completeNodes(flags *genericclioptions.ConfigFlags) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		cfg, err := flags.ToRESTConfig()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		cfg.Timeout = 5 * time.Second
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		given := map[string]bool{}
		for _, a := range args {
			given[a] = true
		}
		var out []string
		for _, n := range nodes.Items {
			if !given[n.Name] && strings.HasPrefix(n.Name, toComplete) {
				out = append(out, n.Name)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// completeNames completes with the names list returns (from the cluster),
// offering nothing when it fails.
func completeNames(flags *genericclioptions.ConfigFlags, list func(context.Context, *session) ([]string, error)) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		s, err := dial(flags)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		names, err := list(ctx, s)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []string
		for _, n := range names {
			if strings.HasPrefix(n, toComplete) {
				out = append(out, n)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// completeNamesOf completes the names of the objects newList lists.
func completeNamesOf(flags *genericclioptions.ConfigFlags, newList func() client.ObjectList) cobra.CompletionFunc {
	return completeNames(flags, func(ctx context.Context, s *session) ([]string, error) {
		list := newList()
		if err := s.client.List(ctx, list); err != nil {
			return nil, err
		}
		objs, err := meta.ExtractList(list)
		if err != nil {
			return nil, err
		}
		names := make([]string, 0, len(objs))
		for _, o := range objs {
			if m, err := meta.Accessor(o); err == nil {
				names = append(names, m.GetName())
			}
		}
		return names, nil
	})
}

// completePolicies completes DrainPolicy names.
func completePolicies(flags *genericclioptions.ConfigFlags) cobra.CompletionFunc {
	return completeNamesOf(flags, func() client.ObjectList { return &v1alpha1.DrainPolicyList{} })
}

// completeProviders completes EvacuationProvider names.
func completeProviders(flags *genericclioptions.ConfigFlags) cobra.CompletionFunc {
	return completeNamesOf(flags, func() client.ObjectList { return &v1alpha1.EvacuationProviderList{} })
}

// modes complete --mode.
var completeModes = cobra.FixedCompletions([]string{string(v1alpha1.ModeMaintenance), string(v1alpha1.ModeDecommission)}, cobra.ShellCompDirectiveNoFileComp)

// addCompletionExamples creates cobra's completion command now, so that it
// and its per-shell subcommands get examples like every other command.
func addCompletionExamples(root *cobra.Command) {
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Name() != "completion" {
			continue
		}
		c.Example = `  # bash, for this shell
  source <(vacate completion bash)
  # zsh, for every new shell
  vacate completion zsh > "${fpath[1]}/_vacate"
  # as a kubectl plugin (kubectl 1.26+): kubectl_complete-vacate on PATH, as make install,
  # the release archives and krew put it, completes 'kubectl vacate <TAB>'`
		for _, sub := range c.Commands() {
			sub.Example = "  vacate completion " + sub.Name() + " > vacate-completion." + sub.Name()
		}
	}
}
