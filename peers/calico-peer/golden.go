package main

// calico-peer golden: the golden byte files in protocol/tests/golden/calico. Every file is
// what Go's encoding/gob and github.com/golang/snappy produce for fixed messages (fixed
// times, ids and values), with an annotated listing (.txt) beside it saying which bytes are
// type definitions and which are values. TestGoldenFilesUpToDate regenerates them and fails
// on any difference with the committed ones.

import (
	"bytes"
	"encoding/gob"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	"typha-rs/peers/calico-peer/syncproto"
)

func runGolden(args []string) error {
	fs := flag.NewFlagSet("golden", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	out := fs.String("out", "", "directory to write the golden files into (required)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(os.Stdout)
			fs.PrintDefaults()
			os.Exit(0)
		}
		return usagef("golden: %v", err)
	}
	if *out == "" || fs.NArg() > 0 {
		return usagef("golden: want --out DIR and nothing else")
	}
	files, err := goldenFiles()
	if err != nil {
		return err
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		path := filepath.Join(*out, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, files[name], 0o644); err != nil {
			return err
		}
	}
	fmt.Printf("wrote %d golden files into %s\n", len(files), *out)
	return nil
}

// The fixed contents. The values are examples in the shapes Calico's syncers send (a v1
// workload endpoint, a v3 Node resource, a raw config string, a deletion); nothing decodes
// them here.
var (
	goldenTime     = time.Date(2026, 11, 24, 12, 0, 0, 123456789, time.UTC)
	goldenClientID = uint64(0x1234567800000001)
	goldenServerID = uint64(0x0abcdef000000001)

	goldenHello = syncproto.MsgClientHello{
		Hostname:                       "node-1",
		Info:                           "calico-peer golden",
		Version:                        "v3.32.0",
		SyncerType:                     syncproto.SyncerTypeFelix,
		SupportsDecoderRestart:         true,
		SupportedCompressionAlgorithms: []syncproto.CompressionAlgorithm{syncproto.CompressionSnappy},
		SupportsModernPolicyKeys:       true,
		ClientConnID:                   goldenClientID,
	}
	goldenServerHello = syncproto.MsgServerHello{
		Version:                     "v3.32.0",
		SyncerType:                  syncproto.SyncerTypeFelix,
		SupportsNodeResourceUpdates: true,
		ServerConnID:                goldenServerID,
	}
	goldenSnapshotKVs = []syncproto.SerializedUpdate{
		{
			Key: "/calico/v1/host/node-1/workload/k8s/default%2fweb-0/endpoint/eth0",
			Value: []byte(`{"state":"active","name":"cali5d3c9e1a0b2","mac":"ee:ee:ee:ee:ee:ee",` +
				`"profile_ids":["kns.default","ksa.default.default"],"ipv4_nets":["10.0.1.5/32"],` +
				`"labels":{"app":"web","projectcalico.org/namespace":"default"}}`),
			Revision:   "1001",
			UpdateType: syncproto.UpdateTypeKVNew,
		},
		{
			Key: "/calico/resources/v3/projectcalico.org/nodes/node-1",
			Value: []byte(`{"kind":"Node","apiVersion":"projectcalico.org/v3","metadata":{"name":"node-1"},` +
				`"spec":{"bgp":{"ipv4Address":"192.168.0.11/24"}}}`),
			Revision:          "1002",
			V3ResourceVersion: "1002",
			UpdateType:        syncproto.UpdateTypeKVNew,
		},
		{
			Key:        "/calico/v1/config/LogSeverityScreen",
			Value:      []byte("Info"),
			Revision:   "1003",
			UpdateType: syncproto.UpdateTypeKVNew,
		},
	}
	goldenDeltaKVs = []syncproto.SerializedUpdate{
		{
			Key:        "/calico/v1/policy/GlobalNetworkPolicy//default.allow-dns",
			Revision:   "1004",
			UpdateType: syncproto.UpdateTypeKVDeleted,
		},
	}
)

// goldenMessageList is one value of every message type, in a fixed order.
func goldenMessageList() []any {
	return []any{
		goldenHello,
		goldenServerHello,
		syncproto.MsgDecoderRestart{Message: restartForSnapshotText, CompressionAlgorithm: syncproto.CompressionSnappy},
		syncproto.MsgACK{},
		syncproto.MsgSyncStatus{SyncStatus: syncproto.InSync},
		syncproto.MsgPing{Timestamp: goldenTime},
		syncproto.MsgPong{PingTimestamp: goldenTime},
		syncproto.MsgKVs{KVs: append(append([]syncproto.SerializedUpdate{}, goldenSnapshotKVs...), goldenDeltaKVs...)},
	}
}

// gobOf encodes messages on one fresh gob stream and returns each message's bytes.
func gobOf(msgs ...any) ([][]byte, error) {
	var buf bytes.Buffer
	s, err := newOutStream(&buf, "")
	if err != nil {
		return nil, err
	}
	var out [][]byte
	for _, m := range msgs {
		b, err := s.encode(m)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

// sessionBuilder assembles a byte stream region by region, as a connection would carry it.
type sessionBuilder struct {
	buf     bytes.Buffer
	regions []region
}

func (b *sessionBuilder) begin(kind streamKind, why string) {
	b.regions = append(b.regions, region{b.buf.Len(), kind, why})
}

// stream encodes msgs on a fresh gob stream (snappy-framed if comp says so), flushed per
// message as Typha does.
func (b *sessionBuilder) stream(comp syncproto.CompressionAlgorithm, why string, msgs ...any) error {
	kind := regionGob
	if comp != "" {
		kind = regionSnappy
	}
	b.begin(kind, why)
	s, err := newOutStream(&b.buf, comp)
	if err != nil {
		return err
	}
	for _, m := range msgs {
		if _, err := s.encode(m); err != nil {
			return err
		}
	}
	return nil
}

func (b *sessionBuilder) files(name string, into map[string][]byte) {
	into[name+".bin"] = bytes.Clone(b.buf.Bytes())
	into[name+".txt"] = []byte(header(name+".bin", b.buf.Len()) + annotate(b.buf.Bytes(), b.regions))
}

func header(name string, n int) string {
	return fmt.Sprintf("# %s: %d bytes. Generated by `calico-peer golden`; offsets in hex.\n"+
		"# TYPE DEFINITION = gob message [-id][wireType]; VALUE = [id][value]; see README.md.\n\n", name, n)
}

// goldenFiles builds every golden file, by its path relative to the golden directory.
func goldenFiles() (map[string][]byte, error) {
	files := map[string][]byte{}
	single := func(name, why string, data []byte) {
		files[name+".bin"] = data
		files[name+".txt"] = []byte(header(name+".bin", len(data)) +
			annotate(data, []region{{0, regionGob, why}}))
	}

	// One file per message type: first on a fresh stream, and the value alone.
	for _, m := range goldenMessageList() {
		name := syncproto.NameOf(m)
		twice, err := gobOf(m, m)
		if err != nil {
			return nil, err
		}
		single("fresh/"+name, "the first message on a fresh stream", twice[0])
		single("value/"+name, "the message once its types are defined on the stream", twice[1])
	}

	// The preambles: every definition a side needs, before any value.
	single("preamble/server", "every type definition a server needs", preamble(serverPreambleIDs))
	single("preamble/client", "every type definition a client needs", preamble(clientPreambleIDs))

	sessions, err := goldenSessions()
	if err != nil {
		return nil, err
	}
	for name, b := range sessions {
		b.files("session/"+name, files)
	}
	return files, nil
}

// goldenSessions builds the whole-session files, each with its regions (a region is one gob
// stream; the server writes the next region only after the client's ACK).
func goldenSessions() (map[string]*sessionBuilder, error) {
	out := map[string]*sessionBuilder{}
	restart := syncproto.MsgDecoderRestart{Message: restartForSnapshotText, CompressionAlgorithm: syncproto.CompressionSnappy}

	// As Typha v3.32 serves a calico-node that offers decoder restart and snappy: hello and
	// restart on the plain stream; after the ACK the pre-encoded snapshot (its own snappy
	// stream, ending with a restart); after the second ACK the live stream.
	s := &sessionBuilder{}
	if err := s.stream("", "hello and restart, plain gob", goldenServerHello, restart); err != nil {
		return nil, err
	}
	snap, err := encodeSnapshot(goldenSnapshotKVs, 1000, nil)
	if err != nil {
		return nil, err
	}
	s.begin(regionSnappy, "the pre-encoded snapshot, written after the client's first ACK")
	s.buf.Write(snap)
	if err := s.stream(syncproto.CompressionSnappy, "the live stream, after the client's second ACK",
		syncproto.MsgSyncStatus{SyncStatus: syncproto.InSync},
		syncproto.MsgKVs{KVs: goldenDeltaKVs},
		syncproto.MsgPing{Timestamp: goldenTime}); err != nil {
		return nil, err
	}
	out["calico-snappy-server"] = s

	c := &sessionBuilder{}
	if err := c.stream("", "the client's only stream: it never restarts its encoder", goldenHello,
		syncproto.MsgACK{}, syncproto.MsgACK{}, syncproto.MsgPong{PingTimestamp: goldenTime}); err != nil {
		return nil, err
	}
	out["calico-snappy-client"] = c

	// For a client that offers no decoder restart: one plain gob stream, the snapshot
	// streamed in MsgKVs of up to 100, the status, the delta, a ping.
	p := &sessionBuilder{}
	if err := p.stream("", "the only stream, plain gob", goldenServerHello,
		syncproto.MsgKVs{KVs: goldenSnapshotKVs},
		syncproto.MsgSyncStatus{SyncStatus: syncproto.InSync},
		syncproto.MsgKVs{KVs: goldenDeltaKVs},
		syncproto.MsgPing{Timestamp: goldenTime}); err != nil {
		return nil, err
	}
	out["calico-plain-server"] = p
	plainHello := goldenHello
	plainHello.SupportsDecoderRestart = false
	plainHello.SupportedCompressionAlgorithms = nil
	pc := &sessionBuilder{}
	if err := pc.stream("", "the client's only stream", plainHello,
		syncproto.MsgPong{PingTimestamp: goldenTime}); err != nil {
		return nil, err
	}
	out["calico-plain-client"] = pc

	// The snappy session built the encode-once way: every gob stream opens with the server
	// preamble, and every message after it is a value (value/*.bin), compressed on its own
	// into snappy chunks, so the same chunks can be written to every connection.
	shared, err := sharedSession()
	if err != nil {
		return nil, err
	}
	out["shared-snappy-server"] = shared
	return out, nil
}

// sharedSession assembles the encode-once form of the snappy session from the preamble and
// value files: no encoder involved.
func sharedSession() (*sessionBuilder, error) {
	values := map[string][]byte{}
	for _, m := range []any{
		goldenServerHello,
		syncproto.MsgDecoderRestart{Message: restartForSnapshotText, CompressionAlgorithm: syncproto.CompressionSnappy},
		syncproto.MsgKVs{KVs: goldenSnapshotKVs},
		syncproto.MsgDecoderRestart{Message: snapshotEndText, CompressionAlgorithm: syncproto.CompressionSnappy},
		syncproto.MsgSyncStatus{SyncStatus: syncproto.InSync},
		syncproto.MsgKVs{KVs: goldenDeltaKVs},
		syncproto.MsgPing{Timestamp: goldenTime},
	} {
		v, err := valueBytes(m)
		if err != nil {
			return nil, err
		}
		values[describe(m)] = v
	}
	pre := preamble(serverPreambleIDs)
	b := &sessionBuilder{}
	out := &b.buf
	b.begin(regionGob, "plain gob: the preamble, then values")
	out.Write(pre)
	out.Write(values[describe(goldenServerHello)])
	out.Write(values[describe(syncproto.MsgDecoderRestart{Message: restartForSnapshotText, CompressionAlgorithm: syncproto.CompressionSnappy})])

	snappyStream := func(why string, msgs ...any) {
		b.begin(regionSnappy, why)
		out.WriteString(snappyStreamIdentifier)
		out.Write(snappyChunks(pre))
		for _, m := range msgs {
			out.Write(snappyChunks(values[describe(m)]))
		}
	}
	snappyStream("snapshot: identifier, preamble chunk, then shared value chunks",
		syncproto.MsgKVs{KVs: goldenSnapshotKVs},
		syncproto.MsgDecoderRestart{Message: snapshotEndText, CompressionAlgorithm: syncproto.CompressionSnappy})
	snappyStream("live: identifier, preamble chunk, then shared value chunks",
		syncproto.MsgSyncStatus{SyncStatus: syncproto.InSync},
		syncproto.MsgKVs{KVs: goldenDeltaKVs},
		syncproto.MsgPing{Timestamp: goldenTime})
	return b, nil
}

// valueBytes is a message's gob bytes once its types are known on the stream: what gob
// writes for the second message of that type.
func valueBytes(m any) ([]byte, error) {
	var buf bytes.Buffer
	enc := gob.NewEncoder(&buf)
	if err := enc.Encode(&syncproto.Envelope{Message: m}); err != nil {
		return nil, err
	}
	buf.Reset()
	if err := enc.Encode(&syncproto.Envelope{Message: m}); err != nil {
		return nil, err
	}
	return bytes.Clone(buf.Bytes()), nil
}
