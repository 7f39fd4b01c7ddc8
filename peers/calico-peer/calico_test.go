package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/gob"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/golang/snappy"

	"typha-rs/peers/calico-peer/syncproto"
)

// goldenDir is where the committed golden files live, from this package's directory.
const goldenDir = "../../protocol/tests/golden/calico"

// The committed golden files are exactly what the generator writes now: no file changed,
// missing or left over. On failure, regenerate with
// `target/peers/bin/calico-peer golden --out protocol/tests/golden/calico` and review the diff.
func TestGoldenFilesUpToDate(t *testing.T) {
	files, err := goldenFiles()
	if err != nil {
		t.Fatal(err)
	}
	committed := map[string]bool{}
	err = filepath.WalkDir(goldenDir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(goldenDir, path)
		if rel != "README.md" {
			committed[filepath.ToSlash(rel)] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(goldenDir, filepath.FromSlash(name)))
		if err != nil {
			t.Errorf("%s: not committed (%v)", name, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: drifted: the generator now writes %d bytes, %d are committed", name, len(want), len(got))
		}
		delete(committed, name)
	}
	for name := range committed {
		t.Errorf("%s: committed but no longer generated", name)
	}
}

// Our hand-written type definitions (gobwire.go) are byte for byte what encoding/gob sends,
// at the ids gob gives them in this program.
func TestTypeDefinitionsMatchGob(t *testing.T) {
	seen := map[int]bool{}
	for _, m := range goldenMessageList() {
		fresh, err := gobOf(m)
		if err != nil {
			t.Fatal(err)
		}
		rest := fresh[0]
		for len(rest) > 0 {
			n, used, err := readUint(rest)
			if err != nil {
				t.Fatal(err)
			}
			body := rest[used : used+int(n)]
			rest = rest[used+int(n):]
			id, k, _ := readInt(body)
			var def []byte
			switch {
			case id < 0:
				def = body
			case id == idEnvelope:
				// [envelope id][field 1][name]: an inline definition follows on first use.
				b := body[k+1:]
				ln, k2, _ := readUint(b)
				b = b[k2+int(ln):]
				if inner, _, _ := readInt(b); inner < 0 {
					def = b
				}
			}
			if def == nil {
				continue
			}
			defID, _, _ := readInt(def)
			want, ok := typeDefs[int(-defID)]
			if !ok {
				t.Errorf("%s: gob defined type id %d, which our table lacks", syncproto.NameOf(m), -defID)
				continue
			}
			if !bytes.Equal(def, want.wire()) {
				t.Errorf("type %d (%s): gob sends\n% x\nwe write\n% x", -defID, want.Name, def, want.wire())
			}
			seen[int(-defID)] = true
		}
	}
	for id := range typeDefs {
		if !seen[id] {
			t.Errorf("type id %d (%s) in our table was never sent by gob", id, typeDefs[id].Name)
		}
	}
}

// A stream that opens with the preamble and then carries value bytes only decodes, with Go's
// own decoder, to the messages: the encode-once scheme works for a Go peer.
func TestPreambleThenValuesDecode(t *testing.T) {
	check := func(ids []int, msgs []any) {
		stream := preamble(ids)
		for _, m := range msgs {
			v, err := valueBytes(m)
			if err != nil {
				t.Fatal(err)
			}
			stream = append(stream, v...)
		}
		dec := gob.NewDecoder(bytes.NewReader(stream))
		for _, want := range msgs {
			var env syncproto.Envelope
			if err := dec.Decode(&env); err != nil {
				t.Fatalf("decoding %s: %v", syncproto.NameOf(want), err)
			}
			if !reflect.DeepEqual(env.Message, want) {
				t.Errorf("decoded %#v, want %#v", env.Message, want)
			}
		}
		var env syncproto.Envelope
		if err := dec.Decode(&env); err != io.EOF {
			t.Errorf("after the last message: %v, want EOF", err)
		}
	}
	all := goldenMessageList()
	check(serverPreambleIDs, []any{all[1], all[2], all[4], all[5], all[7]})
	check(clientPreambleIDs, []any{all[0], all[3], all[6]})
}

// A value's bytes do not depend on what the stream carried before it: that is what makes
// them shareable across connections.
func TestValueBytesIndependentOfHistory(t *testing.T) {
	for _, m := range goldenMessageList() {
		want, err := valueBytes(m)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		s, _ := newOutStream(&buf, "")
		for _, other := range goldenMessageList() {
			if _, err := s.encode(other); err != nil {
				t.Fatal(err)
			}
		}
		got, err := s.encode(m)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: after other traffic\n% x\nalone\n% x", syncproto.NameOf(m), got, want)
		}
	}
}

func TestSnappyChunksMatchGolangSnappy(t *testing.T) {
	for _, m := range goldenMessageList() {
		v, _ := valueBytes(m)
		var buf bytes.Buffer
		sw := snappy.NewBufferedWriter(&buf)
		if _, err := sw.Write(v); err != nil {
			t.Fatal(err)
		}
		if err := sw.Flush(); err != nil {
			t.Fatal(err)
		}
		want := buf.Bytes()[len(snappyStreamIdentifier):]
		if got := snappyChunks(v); !bytes.Equal(got, want) {
			t.Errorf("%s: our chunk\n% x\ngolang/snappy\n% x", syncproto.NameOf(m), got, want)
		}
	}
}

// replaySession plays a golden server session on a real socket: the first region at once,
// each further region after the client's next MsgACK, then waits for the pong.
func replaySession(t *testing.T, l net.Listener, b *sessionBuilder) <-chan error {
	done := make(chan error, 1)
	go func() {
		done <- func() error {
			c, err := l.Accept()
			if err != nil {
				return err
			}
			pc := newPeerConn(c, nil)
			defer pc.close()
			if _, err := pc.receive(); err != nil {
				return err
			}
			data := b.buf.Bytes()
			for i, r := range b.regions {
				if i > 0 {
					msg, err := pc.receive()
					if err != nil {
						return err
					}
					if _, ok := msg.(syncproto.MsgACK); !ok {
						return errors.New("expected an ACK, got " + describe(msg))
					}
				}
				end := len(data)
				if i+1 < len(b.regions) {
					end = b.regions[i+1].Start
				}
				if _, err := c.Write(data[r.Start:end]); err != nil {
					return err
				}
			}
			msg, err := pc.receive()
			if err != nil {
				return err
			}
			if _, ok := msg.(syncproto.MsgPong); !ok {
				return errors.New("expected a pong, got " + describe(msg))
			}
			return nil
		}()
	}()
	return done
}

func listen(t *testing.T) net.Listener {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func clientFor(t *testing.T, args ...string) clientConfig {
	cfg, err := parseClientFlags(append([]string{"--hostname", "node-1", "--read-timeout", "5s", "--quiet"}, args...))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// Our client reads each golden server session (Typha's way and the encode-once way) to the
// same end state.
func TestClientReadsGoldenSessions(t *testing.T) {
	sessions, err := goldenSessions()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]kvEntry{}
	for _, u := range goldenSnapshotKVs {
		want[u.Key] = entryOf(u)
	}
	for _, tc := range []struct {
		session  string
		args     []string
		restarts int
	}{
		{"calico-snappy-server", nil, 2},
		{"shared-snappy-server", nil, 2},
		{"calico-plain-server", []string{"--no-decoder-restart"}, 0},
	} {
		t.Run(tc.session, func(t *testing.T) {
			l := listen(t)
			done := replaySession(t, l, sessions[tc.session])
			out, err := clientSession(clientFor(t, append([]string{"--addr", l.Addr().String()}, tc.args...)...))
			if err != nil {
				t.Fatalf("client: %v (summary %+v)", err, out.Summary)
			}
			if err := <-done; err != nil {
				t.Fatalf("server: %v", err)
			}
			if !reflect.DeepEqual(out.KVs, want) {
				t.Errorf("end state %#v, want %#v", out.KVs, want)
			}
			s := out.Summary
			if len(s.DecoderRestarts) != tc.restarts || !s.InSync || s.Deletions != 1 || s.MessagesSent["MsgPong"] != 1 {
				t.Errorf("summary %+v", s)
			}
		})
	}
}

// serveScript runs the serve loop on a script for n connections.
func serveScript(t *testing.T, script string, n int, tlsf tlsFiles) (string, <-chan error) {
	steps, err := loadScript(script)
	if err != nil {
		t.Fatal(err)
	}
	cfg := serveConfig{script: steps, tls: tlsf, connections: n, version: "v3.32.0",
		handshakeTimeout: 5 * time.Second, ackTimeout: 5 * time.Second, writeTimeout: 5 * time.Second,
		maxMessage: 1 << 20}
	var l net.Listener
	if tlsf.enabled() {
		tc, err := tlsf.serverConfig()
		if err != nil {
			t.Fatal(err)
		}
		l = tls.NewListener(listen(t), tc)
	} else {
		l = listen(t)
	}
	done := make(chan error, 1)
	go func() { done <- serveConns(l, cfg) }()
	return l.Addr().String(), done
}

func TestScriptedSession(t *testing.T) {
	dir := t.TempDir()
	certs := makeCerts(t, dir)
	for _, tc := range []struct {
		name   string
		script string
		args   []string
		server tlsFiles
		want   map[string]string
	}{
		{"snappy", "testdata/typical.json", nil, tlsFiles{}, map[string]string{
			"/calico/v1/config/LogSeverityScreen":                               "Debug",
			"/calico/v1/host/node-1/workload/k8s/default%2fweb-0/endpoint/eth0": `{"state":"active","name":"cali5d3c9e1a0b2","profile_ids":["kns.default"],"ipv4_nets":["10.0.1.5/32"]}`,
			"/calico/resources/v3/projectcalico.org/nodes/node-1":               `{"kind":"Node","apiVersion":"projectcalico.org/v3","metadata":{"name":"node-1"}}`,
		}},
		{"snappy over TLS", "testdata/typical.json",
			[]string{"--ca", certs.ca, "--cert", certs.clientCert, "--key", certs.clientKey, "--server-cn", "typha-server"},
			tlsFiles{ca: certs.ca, cert: certs.serverCert, key: certs.serverKey, peerCN: "typha-client"},
			map[string]string{
				"/calico/v1/config/LogSeverityScreen":                               "Debug",
				"/calico/v1/host/node-1/workload/k8s/default%2fweb-0/endpoint/eth0": `{"state":"active","name":"cali5d3c9e1a0b2","profile_ids":["kns.default"],"ipv4_nets":["10.0.1.5/32"]}`,
				"/calico/resources/v3/projectcalico.org/nodes/node-1":               `{"kind":"Node","apiVersion":"projectcalico.org/v3","metadata":{"name":"node-1"}}`,
			}},
		{"plain until in sync", "testdata/plain.json", []string{"--no-decoder-restart", "--until-in-sync"}, tlsFiles{},
			map[string]string{
				"/calico/v1/config/LogSeverityScreen": "Info",
				"/calico/v1/host/node-1/bird_ip":      "192.168.0.11",
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, done := serveScript(t, tc.script, 1, tc.server)
			rec := filepath.Join(t.TempDir(), "rec")
			out, err := clientSession(clientFor(t, append([]string{"--addr", addr, "--record", rec}, tc.args...)...))
			if err != nil {
				t.Fatalf("client: %v", err)
			}
			if err := <-done; err != nil {
				t.Fatalf("server: %v", err)
			}
			got := map[string]string{}
			for k, v := range out.KVs {
				got[k] = v.Value
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("end state %v, want %v", got, tc.want)
			}
			if !out.Summary.InSync {
				t.Errorf("never InSync: %+v", out.Summary)
			}
			listing, err := os.ReadFile(filepath.Join(rec, "wire-in.txt"))
			if err != nil || strings.Contains(string(listing), "!!") {
				t.Errorf("recording: %v\n%s", err, listing)
			}
		})
	}
}

// Every syncer type calico-node opens goes through the hello; the server echoes the type.
func TestEverySyncerType(t *testing.T) {
	for _, st := range syncproto.AllSyncerTypes {
		script := writeScript(t, `[{"expectHello": {"syncerType": "`+string(st)+`"}}, {"serverHello": {}},
			{"syncStatus": "InSync"}, {"expectClose": true}]`)
		addr, done := serveScript(t, script, 1, tlsFiles{})
		out, err := clientSession(clientFor(t, "--addr", addr, "--syncer", string(st), "--until-in-sync"))
		if err != nil {
			t.Fatalf("%s: %v", st, err)
		}
		if err := <-done; err != nil {
			t.Errorf("%s: server: %v", st, err)
		}
		if out.Summary.ServerHello.SyncerType != string(st) || out.SyncerType != string(st) {
			t.Errorf("%s: %+v", st, out.Summary.ServerHello)
		}
	}
}

// An int revision arrives as an int64 interface; our client keeps its type.
func TestIntRevision(t *testing.T) {
	addr, done := serveScript(t, "testdata/plain.json", 1, tlsFiles{})
	out, err := clientSession(clientFor(t, "--addr", addr, "--no-decoder-restart", "--until-in-sync"))
	if err != nil {
		t.Fatal(err)
	}
	<-done
	e := out.KVs["/calico/v1/host/node-1/bird_ip"]
	if e.Revision != "7" || e.RevisionType != "int64" {
		t.Errorf("got %+v", e)
	}
}

func writeScript(t *testing.T, body string) string {
	p := filepath.Join(t.TempDir(), "script.json")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// Protocol errors end the client with an error, and it closes the connection.
func TestClientRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, script string
		args         []string
		serverOK     bool
	}{
		{"no node resource updates", `[{"serverHello": {"supportsNodeResourceUpdates": false}}, {"expectClose": true}]`, nil, true},
		{"wrong syncer", `[{"serverHello": {"syncerType": "bgp"}}, {"expectClose": true}]`, nil, true},
		{"not a hello first", `[{"syncStatus": "InSync"}, {"expectClose": true}]`, nil, true},
		{"garbage", `[{"serverHello": {}}, {"rawHex": "03ff9000"}, {"expectClose": true}]`, nil, true},
		// The server waits for an ACK that never comes: only the client's verdict counts.
		{"restart not offered", `[{"serverHello": {}}, {"decoderRestart": "snappy"}]`, []string{"--no-decoder-restart"}, false},
		{"compression not offered", `[{"serverHello": {}}, {"decoderRestart": "snappy"}]`, []string{"--no-compression"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, done := serveScript(t, writeScript(t, tc.script), 1, tlsFiles{})
			if _, err := clientSession(clientFor(t, append([]string{"--addr", addr}, tc.args...)...)); err == nil {
				t.Error("the client accepted it")
			}
			if err := <-done; tc.serverOK && err != nil {
				t.Errorf("server: %v", err)
			}
		})
	}
}

// The scripted server holds the client to the script: a hello that does not match fails it.
func TestServerChecksHello(t *testing.T) {
	addr, done := serveScript(t, writeScript(t, `[{"expectHello": {"syncerType": "bgp"}}]`), 1, tlsFiles{})
	clientSession(clientFor(t, "--addr", addr, "--duration", "1s"))
	if err := <-done; err == nil || !strings.Contains(err.Error(), "1 of 1") {
		t.Errorf("server: %v", err)
	}
}

// A client message past the size limit ends the connection before it is read in full.
func TestServerMessageLimit(t *testing.T) {
	steps, _ := parseScript([]byte(`[]`))
	l := listen(t)
	cfg := serveConfig{script: steps, connections: 1, handshakeTimeout: 5 * time.Second,
		ackTimeout: time.Second, writeTimeout: time.Second, maxMessage: 1 << 10}
	done := make(chan error, 1)
	go func() { done <- serveConns(l, cfg) }()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	big := goldenHello
	big.Hostname = strings.Repeat("x", 4096)
	gob.NewEncoder(c).Encode(&syncproto.Envelope{Message: big})
	if err := <-done; err == nil {
		t.Error("a 4 KiB hello passed a 1 KiB limit")
	}
}

func TestFlags(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"--addr", "nohostport"},
		{"--addr", "h:1", "--syncer", "calc"},
		{"--addr", "h:1", "--ca", "x"},
		{"--addr", "h:1", "extra"},
	} {
		_, err := parseClientFlags(args)
		var ue usageError
		if !errors.As(err, &ue) {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
	for _, script := range []string{
		`[{"ping": true, "close": true}]`,
		`[{}]`,
		`[{"syncStatus": "Ready"}]`,
		`[{"kvs": [{"value": 1}]}]`,
		`[{"decoderRestart": "zstd"}]`,
		`[{"bogus": 1}]`,
	} {
		if _, err := parseScript([]byte(script)); err == nil {
			t.Errorf("%s: accepted", script)
		}
	}
}

type certFiles struct{ ca, serverCert, serverKey, clientCert, clientKey string }

// makeCerts writes a CA and a server (CN typha-server) and client (CN typha-client)
// certificate signed by it.
func makeCerts(t *testing.T, dir string) certFiles {
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	write := func(name, kind string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	leaf := func(cn string, usage x509.ExtKeyUsage, serial int64) (string, string) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, _ := x509.MarshalECPrivateKey(key)
		return write(cn+".crt", "CERTIFICATE", der), write(cn+".key", "EC PRIVATE KEY", kder)
	}
	var c certFiles
	c.ca = write("ca.crt", "CERTIFICATE", caDER)
	c.serverCert, c.serverKey = leaf("typha-server", x509.ExtKeyUsageServerAuth, 2)
	c.clientCert, c.clientKey = leaf("typha-client", x509.ExtKeyUsageClientAuth, 3)
	return c
}
