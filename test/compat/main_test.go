// Package compat is the compatibility suite's own part: what no other
// package's test proves about the Kubernetes version a dev cluster runs.
// `make test-compat K8S=<minor>` runs it (build tag compat) together with
// the tests of test/rbac, test/install and test/e2e that COMPAT_RUN names,
// on a dev cluster of that minor; docs/dev/compat.md says why the oldest
// minor is the oldest. Without the tag only the suite's own checks run.
package compat

import (
	"os"
	"testing"

	"github.com/vacate-dev/vacate/internal/dev/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }
