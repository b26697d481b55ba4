// Command etcd is the upstream etcd server, built from source at the version
// that the pinned Kubernetes requires, for vacate's local dev cluster.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
