// Command etcd is etcd's own server program: the etcd binary's main package lives in
// go.etcd.io/etcd/v3, which is not published at a 3.6 version, so this calls the same entry
// point from the server module.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
