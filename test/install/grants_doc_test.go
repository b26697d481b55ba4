package install

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	authzv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	"github.com/spf13/cobra"

	"github.com/vacate-dev/vacate/internal/cli"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
)

// anyShBlock is a fenced ```sh block, indented or not (in a list item):
// its fence's indentation is taken off each line before it runs.
var anyShBlock = regexp.MustCompile("(?ms)^( *)```sh\n(.*?)^ *```$")

// created are the objects kubectl says it created or configured.
var created = regexp.MustCompile(`(?m)^(clusterrole|clusterrolebinding)\.rbac\.authorization\.k8s\.io/(\S+) (created|configured|unchanged)$`)

// grantBlock is a command block of the documentation that grants one of
// vacate's verbs: it applies a ClusterRole.
type grantBlock struct {
	where, text string
}

// TestGrantCommandsOfTheDocs (issue 44) runs every block of the
// documentation (README.md, docs/, the examples of the CLI's help) that
// grants vacate's verbs, as a reader would, with the real kubectl against
// the dev cluster: each must succeed (kubectl create clusterrole refuses
// verbs it does not know, such as use on drainpolicies, force,
// decommission or report: the documents apply ClusterRole manifests), and
// each subject it binds must then be allowed, by the API server's RBAC
// (a SubjectAccessReview), every verb of the ClusterRole bound, on the
// resources and names the role says.
func TestGrantCommandsOfTheDocs(t *testing.T) {
	c, _ := startCluster(t)
	blocks := grantBlocks(t)
	if len(blocks) < 7 {
		t.Fatalf("found %d blocks that grant vacate's verbs, want at least 7 (cli.md, operations.md, policies.md twice, kubectl-drain.md, evacuation.md, vacate manifests --help): %v", len(blocks), blocks)
	}
	bin := t.TempDir()
	if err := os.Symlink(c.Binaries[devcluster.Kubectl], filepath.Join(bin, "kubectl")); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "KUBECONFIG="+c.Kubeconfig, "HOME="+t.TempDir(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	for _, b := range blocks {
		cmd := exec.Command("bash", "-euo", "pipefail", "-c", b.text)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		t.Logf("%s:\n%s\noutput:\n%s", b.where, b.text, out)
		// Each block on its own, as separate readers run them: two
		// documents may give the same example names.
		objs := created.FindAllStringSubmatch(string(out), -1)
		if err != nil {
			t.Errorf("%s: %v\n%s", b.where, err, out)
			deleteRBAC(c, objs)
			continue
		}
		checked := 0
		for _, o := range objs {
			if o[1] == "clusterrolebinding" {
				checked += checkGranted(t, c, b.where, o[2])
			}
		}
		if checked == 0 {
			t.Errorf("%s grants nothing the API server confirms:\n%s", b.where, out)
		}
		deleteRBAC(c, objs)
	}
}

// grantBlocks are the blocks of README.md, docs/ and the CLI's help
// examples that apply a ClusterRole.
func grantBlocks(t *testing.T) []grantBlock {
	t.Helper()
	root := repoRoot(t)
	files := []string{filepath.Join(root, "README.md")}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") {
			files = append(files, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var blocks []grantBlock
	for _, f := range files {
		doc, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range anyShBlock.FindAllSubmatch(doc, -1) {
			if text := dedent(string(m[2]), len(m[1])); strings.Contains(text, "kind: ClusterRole\n") {
				rel, _ := filepath.Rel(root, f)
				blocks = append(blocks, grantBlock{where: rel, text: text})
			}
		}
	}
	// The CLI's help: each paragraph of an example that applies one.
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, para := range strings.Split(c.Example, "\n\n") {
			if strings.Contains(para, `"kind": "ClusterRole"`) {
				blocks = append(blocks, grantBlock{where: "'" + c.CommandPath() + " --help'", text: dedent(para, 2)})
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(cli.NewRootCommand(cli.Streams{In: strings.NewReader(""), Out: os.Stdout, Err: os.Stderr}, clock.RealClock{}))
	return blocks
}

// dedent takes n spaces off the start of each line that has them.
func dedent(text string, n int) string {
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimPrefix(l, strings.Repeat(" ", n))
	}
	return strings.Join(lines, "\n")
}

// checkGranted asks the API server, for each subject of the binding, whether
// it may do each verb of the ClusterRole bound, and returns how many
// answers it checked.
func checkGranted(t *testing.T, c *devcluster.Cluster, where, binding string) int {
	t.Helper()
	ctx := context.Background()
	crb, err := c.Client.RbacV1().ClusterRoleBindings().Get(ctx, binding, metav1.GetOptions{})
	if err != nil {
		t.Errorf("%s: ClusterRoleBinding %s: %v", where, binding, err)
		return 0
	}
	role, err := c.Client.RbacV1().ClusterRoles().Get(ctx, crb.RoleRef.Name, metav1.GetOptions{})
	if err != nil {
		t.Errorf("%s: ClusterRole %s: %v", where, crb.RoleRef.Name, err)
		return 0
	}
	n := 0
	for _, s := range crb.Subjects {
		for _, r := range role.Rules {
			names := r.ResourceNames
			if len(names) == 0 {
				names = []string{""}
			}
			for _, group := range r.APIGroups {
				for _, res := range r.Resources {
					for _, verb := range r.Verbs {
						for _, name := range names {
							attrs := &authzv1.ResourceAttributes{Group: group, Resource: res, Verb: verb, Name: name}
							if !allowed(t, c, s, attrs) {
								t.Errorf("%s: after the block, %s %s may not %s %s.%s %q", where, s.Kind, s.Name, verb, res, group, name)
							}
							n++
						}
					}
				}
			}
		}
	}
	return n
}

// allowed asks the API server whether subject may do attrs.
func allowed(t *testing.T, c *devcluster.Cluster, s rbacv1.Subject, attrs *authzv1.ResourceAttributes) bool {
	t.Helper()
	spec := authzv1.SubjectAccessReviewSpec{ResourceAttributes: attrs}
	switch s.Kind {
	case rbacv1.UserKind:
		spec.User = s.Name
	case rbacv1.GroupKind:
		spec.User, spec.Groups = "someone-in-"+s.Name, []string{s.Name}
	case rbacv1.ServiceAccountKind:
		spec.User = fmt.Sprintf("system:serviceaccount:%s:%s", s.Namespace, s.Name)
		spec.Groups = []string{"system:serviceaccounts", "system:serviceaccounts:" + s.Namespace}
	}
	sar, err := c.Client.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authzv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return sar.Status.Allowed
}

// deleteRBAC deletes the ClusterRoles and bindings a block created.
func deleteRBAC(c *devcluster.Cluster, objs [][]string) {
	ctx := context.Background()
	for _, o := range objs {
		if o[1] == "clusterrole" {
			_ = c.Client.RbacV1().ClusterRoles().Delete(ctx, o[2], metav1.DeleteOptions{})
		} else {
			_ = c.Client.RbacV1().ClusterRoleBindings().Delete(ctx, o[2], metav1.DeleteOptions{})
		}
	}
}
