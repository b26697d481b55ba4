package app

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/vacate-dev/vacate/internal/version"
)

func TestCloudOf(t *testing.T) {
	for id, want := range map[string]string{
		"aws:///us-east-1a/i-0123456789abcdef0":                                                    CloudAWS,
		"gce://project/europe-west1-b/node-1":                                                      CloudGCP,
		"azure:///subscriptions/x/resourceGroups/y/providers/Microsoft.Compute/virtualMachines/vm": CloudAzure,
		"kwok://node-1": CloudNone,
		"":              CloudNone,
	} {
		if got := CloudOf(id); got != want {
			t.Errorf("CloudOf(%q) = %q, want %q", id, got, want)
		}
	}
}

// TestBadFlagsSayWhatIsWrong: bad input exits 2 before anything runs, with
// every mistake named.
func TestBadFlagsSayWhatIsWrong(t *testing.T) {
	t.Setenv("NODE_NAME", "")
	var stderr bytes.Buffer
	code := Main([]string{"--cloud", "openstack", "--aws-rebalance", "maybe", "--poweroff-mode", "Reboot",
		"--metadata-endpoint", "http://127.0.0.1:1"}, io.Discard, &stderr)
	if code != 2 {
		t.Fatalf("exit %d, want 2; stderr:\n%s", code, stderr.String())
	}
	for _, want := range []string{
		"--node is required",
		`--cloud "openstack": choose aws, gcp, azure, none or auto`,
		`--aws-rebalance "maybe": choose cordon or drain`,
		`--poweroff-mode "Reboot": choose Decommission or Maintenance`,
	} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}
	stderr.Reset()
	if code := Main([]string{"--node", "n1", "--cloud", "auto", "--metadata-endpoint", "http://127.0.0.1:1"}, io.Discard, &stderr); code != 2 ||
		!strings.Contains(stderr.String(), "--metadata-endpoint needs --cloud aws, gcp or azure") {
		t.Errorf("exit %d, stderr %q: want the endpoint refused without a cloud", code, stderr.String())
	}
}

func TestVersionFlag(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := Main([]string{"--version"}, &stdout, &stderr); code != 0 {
		t.Fatalf("--version exited %d: %s", code, stderr.String())
	}
	if !strings.HasPrefix(stdout.String(), "vacate-agent "+version.Get().Version) || stderr.Len() > 0 {
		t.Errorf("--version printed %q and %q", stdout.String(), stderr.String())
	}
}
