package release

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	"helm.sh/helm/v4/pkg/registry"
	"sigs.k8s.io/yaml"
)

// ChartDir is the chart, relative to the module root.
const ChartDir = "charts/vacate"

// defaultRepository matches a values.yaml line that names one of the
// images of a release by its default repository.
var defaultRepository = regexp.MustCompile(`^(\s+repository: )ghcr\.io/vacate-dev/(vacate-controller|vacate-agent)$`)

// PackageChart packages the chart at dir as a release's: version (without
// the "v") and appVersion (with it) set, the controller's and the agent's
// image repositories in registry and their digests (by image name) as the
// default image.digest values, every file dated created. It returns the
// archive's path under out.
func PackageChart(dir, out, version, registryPath string, digests map[string]string, created time.Time) (string, error) {
	ch, err := loader.LoadDir(dir)
	if err != nil {
		return "", fmt.Errorf("loading the chart %s: %w", dir, err)
	}
	ch.Metadata.Version = strings.TrimPrefix(version, "v")
	ch.Metadata.AppVersion = version
	for _, f := range ch.Raw {
		if f.Name != chartutil.ValuesfileName {
			continue
		}
		if f.Data, err = pinValues(f.Data, registryPath, digests); err != nil {
			return "", fmt.Errorf("the chart's values.yaml: %w", err)
		}
		if err := yaml.Unmarshal(f.Data, &ch.Values); err != nil {
			return "", fmt.Errorf("the chart's values: %w", err)
		}
	}
	dateChart(ch, created)
	path, err := chartutil.Save(ch, out)
	if err != nil {
		return "", fmt.Errorf("packaging the chart: %w", err)
	}
	return path, nil
}

// pinValues rewrites values.yaml's image blocks of vacate-controller and
// vacate-agent ({repository, tag, digest} with the default repository
// ghcr.io/vacate-dev/NAME): the repository in registryPath, and the
// block's digest line (`digest: ""`) set to digests[NAME]. The text is
// changed line by line, so its comments (helm-docs' descriptions) stay.
func pinValues(values []byte, registryPath string, digests map[string]string) ([]byte, error) {
	lines := strings.Split(string(values), "\n")
	found := map[string]int{}
	for i := 0; i < len(lines); i++ {
		m := defaultRepository.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		img := m[2]
		found[img]++
		lines[i] = m[1] + registryPath + "/" + img
		indent := m[1][:len(m[1])-len(strings.TrimLeft(m[1], " "))]
		digest, ok := digests[img]
		if !ok {
			return nil, fmt.Errorf("no digest for %s", img)
		}
		pinned := false
		for j := i + 1; j < len(lines); j++ {
			l := lines[j]
			if strings.TrimSpace(l) == "" || strings.HasPrefix(strings.TrimSpace(l), "#") {
				continue
			}
			if !strings.HasPrefix(l, indent) {
				break // less indented: the block ended
			}
			if rest := l[len(indent):]; strings.HasPrefix(rest, "digest:") {
				lines[j] = indent + "digest: " + digest
				pinned = true
				break
			}
		}
		if !pinned {
			return nil, fmt.Errorf("the image block of %s has no digest value", img)
		}
	}
	if found["vacate-controller"] != 1 || found["vacate-agent"] != 1 {
		return nil, fmt.Errorf("it names the default repositories of vacate-controller and vacate-agent %d and %d times, want once each",
			found["vacate-controller"], found["vacate-agent"])
	}
	return []byte(strings.Join(lines, "\n")), nil
}

// dateChart dates every file of the chart (the archive records them).
func dateChart(ch *chartv2.Chart, t time.Time) {
	ch.ModTime, ch.SchemaModTime = t, t
	for _, f := range ch.Raw {
		f.ModTime = t
	}
	for _, f := range ch.Templates {
		f.ModTime = t
	}
	for _, f := range ch.Files {
		f.ModTime = t
	}
	if ch.Lock != nil {
		ch.Lock.Generated = t
	}
}

// PushedChart is a chart in an OCI registry.
type PushedChart struct {
	// Ref is what `helm install` takes: oci://<registry>/charts/vacate.
	Ref     string `json:"ref"`
	Version string `json:"version"`
	Digest  string `json:"digest"`
}

// PushChart pushes the packaged chart to oci://<registryPath>/charts with
// Helm's own registry client, as `helm push` does, with the credentials
// of Docker's configuration (docker login, crane auth login, helm registry
// login --registry-config ~/.docker/config.json).
func PushChart(archive, registryPath, version string, created time.Time, plainHTTP bool) (*PushedChart, error) {
	data, err := os.ReadFile(archive)
	if err != nil {
		return nil, err
	}
	opts := []registry.ClientOption{registry.ClientOptCredentialsFile(DockerConfig()), registry.ClientOptWriter(&bytes.Buffer{})}
	if plainHTTP {
		opts = append(opts, registry.ClientOptPlainHTTP())
	}
	c, err := registry.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("the Helm registry client: %w", err)
	}
	repo := registryPath + "/charts/vacate"
	chartVersion := strings.TrimPrefix(version, "v")
	r, err := c.Push(data, repo+":"+chartVersion, registry.PushOptCreationTime(created.UTC().Format(time.RFC3339)))
	if err != nil {
		return nil, fmt.Errorf("pushing the chart to oci://%s: %w", repo, err)
	}
	return &PushedChart{Ref: "oci://" + repo, Version: chartVersion, Digest: r.Manifest.Digest}, nil
}

// DockerConfig is Docker's configuration file, where registry credentials
// are: $DOCKER_CONFIG/config.json, else ~/.docker/config.json.
func DockerConfig() string {
	if d := os.Getenv("DOCKER_CONFIG"); d != "" {
		return filepath.Join(d, "config.json")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".docker", "config.json")
}

// PlainHTTP says whether to talk to the registry over plain HTTP: only
// where go-containerregistry would (a loopback, .local or private address)
// and the registry does not answer HTTPS.
func PlainHTTP(reg name.Registry) bool {
	if reg.Scheme() != "http" {
		return false
	}
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("https://" + reg.RegistryStr() + "/v2/")
	if err != nil {
		return true
	}
	resp.Body.Close()
	return false
}
