package v1alpha1

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"time"
)

// DefaultProviderTimeout bounds an EvacuationProvider's silence when its
// spec.timeout does not say (the field's documented default).
const DefaultProviderTimeout = time.Minute

// EvacuationName is the name of the Evacuation of node for provider: the
// controller creates it under this name. It is unique per (node, provider):
// node and provider names may both hold dots, so "<node>.<provider>" alone
// would give node a.b with provider c and node a with provider b.c the same
// name; a hash of the pair follows it. The CLI finds Evacuations by their
// spec, not by this name.
func EvacuationName(node, provider string) string {
	sum := sha256.Sum256([]byte(node + "/" + provider)) // "/" is in neither name
	suffix := "-" + hex.EncodeToString(sum[:])[:10]
	name := node + "." + provider
	if len(name)+len(suffix) > 253 {
		name = name[:253-len(suffix)]
	}
	return strings.TrimRight(name, ".-") + suffix
}
