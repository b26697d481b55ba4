// Command ec2-metadata-mock is the upstream amazon-ec2-metadata-mock, built
// from source at the version pinned in this module's go.mod, for testing
// vacate-agent's EC2 instance metadata source without an EC2 instance.
package main

import (
	"fmt"
	"os"

	"github.com/aws/amazon-ec2-metadata-mock/pkg/cmd/root"
)

func main() {
	if err := root.NewCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "ec2-metadata-mock:", err)
		os.Exit(1)
	}
}
