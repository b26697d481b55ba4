package devcluster

import (
	"strings"
	"testing"
)

func TestControlPlaneForAcceptsMinorsAndPinnedVersions(t *testing.T) {
	oldest := ControlPlanes[0]
	for _, tc := range []struct{ in, want string }{
		{"", KubernetesVersion},
		{"1.37", KubernetesVersion},
		{"v1.37", KubernetesVersion},
		{" 1.37 ", KubernetesVersion},
		{KubernetesVersion, KubernetesVersion},
		{oldest.Minor(), oldest.Kubernetes},
		{"v" + oldest.Minor(), oldest.Kubernetes},
		{oldest.Kubernetes, oldest.Kubernetes},
	} {
		cp, err := ControlPlaneFor(tc.in)
		if err != nil || cp.Kubernetes != tc.want {
			t.Errorf("ControlPlaneFor(%q) = %s, %v; want %s", tc.in, cp.Kubernetes, err, tc.want)
		}
	}
}

func TestControlPlaneForRejectsUnsupportedVersions(t *testing.T) {
	for _, in := range []string{"1.29", "1.36", "1.38", "1.37.1", "1", "latest", "1.3"} {
		_, err := ControlPlaneFor(in)
		if err == nil || !strings.Contains(err.Error(), "supported minors are "+OldestKubernetesMinor()) {
			t.Errorf("ControlPlaneFor(%q) = %v, want an error listing the supported minors", in, err)
		}
	}
}

// TestDefaultControlPlaneIsTheNewest: unset, $VACATE_K8S_VERSION leaves
// dev clusters (and so the whole test suite) on KubernetesVersion, built by
// hack/controlplane and cached under the key it always had.
func TestDefaultControlPlaneIsTheNewest(t *testing.T) {
	t.Setenv(EnvKubernetesVersion, "")
	cp, err := SelectedControlPlane()
	if err != nil {
		t.Fatal(err)
	}
	if cp.Kubernetes != KubernetesVersion || cp.Module != "controlplane" || cp != ControlPlanes[len(ControlPlanes)-1] {
		t.Errorf("default control plane %+v, want %s from hack/controlplane, the last of ControlPlanes", cp, KubernetesVersion)
	}
	if got, want := binarySources(cp)[0].version, "kubernetes-"+KubernetesVersion+"_etcd-"+EtcdVersion; got != want {
		t.Errorf("cache key %q, want %q", got, want)
	}
	keys := map[string]bool{}
	for _, cp := range ControlPlanes {
		keys[binarySources(cp)[0].version] = true
	}
	if len(keys) != len(ControlPlanes) {
		t.Errorf("control planes share a cache key: %v", keys)
	}
}

func TestUpRefusesWhatTheSelectedVersionLacks(t *testing.T) {
	t.Setenv(EnvCacheDir, t.TempDir()) // nothing is built: Up must stop before
	t.Setenv(EnvKubernetesVersion, OldestKubernetesMinor())
	_, err := Up(t.Context(), Options{Dir: t.TempDir(), EvictionRequestAPI: true})
	if err == nil || !strings.Contains(err.Error(), "EvictionRequest API needs Kubernetes "+KubernetesVersion) {
		t.Errorf("Up with the EvictionRequest API on %s = %v, want a refusal", OldestKubernetesMinor(), err)
	}
	t.Setenv(EnvKubernetesVersion, "1.29")
	_, err = Up(t.Context(), Options{Dir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), EnvKubernetesVersion) {
		t.Errorf("Up on Kubernetes 1.29 = %v, want an error naming $%s", err, EnvKubernetesVersion)
	}
}

func TestVersionFlagsStampTheVersion(t *testing.T) {
	flags := kubernetesVersionFlags("v1.30.14")
	for _, want := range []string{"gitMajor=1 ", "gitMinor=30 ", "gitVersion=v1.30.14 "} {
		if !strings.Contains(flags, want) {
			t.Errorf("version flags %q lack %q", flags, want)
		}
	}
}
