// Command calico-peer is our reference peer for Calico's Typha protocol (Calico v3.32): a
// client that connects to a Typha-protocol server the way calico-node does, a server that
// plays a scripted session to a Typha-protocol client, and the generator of the golden byte
// files in protocol/tests/golden/calico. It uses Go's own encoding/gob and the snappy package
// Calico uses, with message types of our own (package syncproto) registered under Calico's
// names. docs/calico-protocol.md describes the protocol; ../README.md how this is built.
//
//	calico-peer client --addr host:port --syncer felix --hostname NAME [...]
//	calico-peer serve --listen host:port --script FILE [...]
//	calico-peer golden --out DIR
//
// Exit codes: 0 done, 1 the session failed (protocol error, timeout, refused), 64 bad usage.
package main

import (
	"errors"
	"fmt"
	"os"
)

const usage = `usage:
  calico-peer client --addr HOST:PORT [--syncer felix|bgp|tunnel-ip-allocation|node-status]
                     [--hostname NAME] [--ca F --cert F --key F --server-cn CN|--server-uri-san URI]
                     [--until-in-sync] [--duration D] [--out state.json] [--record DIR]
                     [--no-compression] [--no-decoder-restart] [--no-modern-policy-keys]
  calico-peer serve  --listen HOST:PORT --script FILE [--connections N] [--addr-file F]
                     [--cert F --key F --ca F --client-cn CN|--client-uri-san URI] [--record DIR]
  calico-peer golden --out DIR
Run a subcommand with -h for all its flags.`

// exitUsage is the exit code for a bad command line (the project's convention).
const exitUsage = 64

// usageError is a bad command line: reported in one line, exit code 64.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return usageError{fmt.Sprintf(format, args...)}
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(exitUsage)
	}
	var err error
	switch os.Args[1] {
	case "client":
		err = runClient(os.Args[2:])
	case "serve":
		err = runServe(os.Args[2:])
	case "golden":
		err = runGolden(os.Args[2:])
	case "-h", "--help", "help":
		fmt.Println(usage)
		return
	default:
		err = usagef("unknown subcommand %q (want client, serve or golden)", os.Args[1])
	}
	if err == nil {
		return
	}
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(os.Stderr, "calico-peer: %v\n", err)
		os.Exit(exitUsage)
	}
	fmt.Fprintf(os.Stderr, "calico-peer %s: %v\n", os.Args[1], err)
	os.Exit(1)
}
