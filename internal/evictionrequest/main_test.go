package evictionrequest

import (
	"os"
	"testing"

	"github.com/vacate-dev/vacate/internal/dev/testenv"
)

// The tests on a cluster share one that serves the EvictionRequest API.
func TestMain(m *testing.M) { os.Exit(testenv.Main(m, testenv.EvictionRequestAPI)) }
