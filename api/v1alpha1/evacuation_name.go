package v1alpha1

import (
	"crypto/sha256"
	"encoding/hex"
	"time"
)

// DefaultProviderTimeout bounds an EvacuationProvider's silence when its
// spec.timeout does not say (the field's documented default).
const DefaultProviderTimeout = time.Minute

// EvacuationName is the name of the Evacuation of node for provider: the
// controller creates it under this name, and the CLI finds it by it.
func EvacuationName(node, provider string) string {
	name := node + "." + provider
	if len(name) <= 253 {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return name[:253-17] + "-" + hex.EncodeToString(sum[:])[:16]
}
