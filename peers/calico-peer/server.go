package main

// calico-peer serve: a Typha-protocol server that plays a script (script.go) on every
// connection, with Go's own gob encoder, so a client written in another language can be
// tested against the real encoding.

import (
	"bytes"
	"crypto/tls"
	"encoding/gob"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/golang/snappy"

	"typha-rs/peers/calico-peer/syncproto"
)

type serveConfig struct {
	listen           string
	script           []step
	tls              tlsFiles
	connections      int
	addrFile         string
	record           string
	version          string
	handshakeTimeout time.Duration
	ackTimeout       time.Duration
	writeTimeout     time.Duration
	maxMessage       int
}

func parseServeFlags(args []string) (serveConfig, error) {
	var c serveConfig
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&c.listen, "listen", "127.0.0.1:0", "address to listen on (port 0: any free port)")
	script := fs.String("script", "", "the script file (JSON; see script.go) (required)")
	fs.StringVar(&c.tls.ca, "ca", "", "CA certificate (PEM) client certificates must lead to")
	fs.StringVar(&c.tls.cert, "cert", "", "server certificate (PEM)")
	fs.StringVar(&c.tls.key, "key", "", "server key (PEM)")
	fs.StringVar(&c.tls.peerCN, "client-cn", "", "required client certificate CN")
	fs.StringVar(&c.tls.peerURISAN, "client-uri-san", "", "required client certificate URI SAN")
	fs.IntVar(&c.connections, "connections", 0, "exit after this many connections have finished (0: serve until killed)")
	fs.StringVar(&c.addrFile, "addr-file", "", "write the address listened on into this file")
	fs.StringVar(&c.record, "record", "", "record each connection's messages and byte streams under DIR/conn-N")
	fs.StringVar(&c.version, "version", "v3.32.0", "default Version of the MsgServerHello")
	fs.DurationVar(&c.handshakeTimeout, "handshake-timeout", 10*time.Second, "TLS and the client's hello must arrive within this (Typha's default)")
	fs.DurationVar(&c.ackTimeout, "ack-timeout", 60*time.Second, "wait for an ACK or pong this long (Typha uses its pong timeout)")
	fs.DurationVar(&c.writeTimeout, "write-timeout", 120*time.Second, "longest write of one message (Typha's default)")
	fs.IntVar(&c.maxMessage, "max-message-bytes", 1<<20, "largest client message accepted (0: no limit; Typha v3.32.0 has none, later Typha 1 MiB)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(os.Stdout)
			fs.PrintDefaults()
			os.Exit(0)
		}
		return c, usagef("serve: %v", err)
	}
	if fs.NArg() > 0 {
		return c, usagef("serve: unexpected argument %q", fs.Arg(0))
	}
	if *script == "" {
		return c, usagef("serve: --script is required")
	}
	var err error
	if c.script, err = loadScript(*script); err != nil {
		return c, usagef("serve: --script %s: %v", *script, err)
	}
	if err := c.tls.check("serve", "--client-cn", "--client-uri-san"); err != nil {
		return c, err
	}
	if c.connections < 0 || c.maxMessage < 0 {
		return c, usagef("serve: --connections and --max-message-bytes must not be negative")
	}
	return c, nil
}

func runServe(args []string) error {
	cfg, err := parseServeFlags(args)
	if err != nil {
		return err
	}
	var l net.Listener
	if cfg.tls.enabled() {
		tc, err := cfg.tls.serverConfig()
		if err != nil {
			return err
		}
		l, err = tls.Listen("tcp", cfg.listen, tc)
		if err != nil {
			return err
		}
	} else if l, err = net.Listen("tcp", cfg.listen); err != nil {
		return err
	}
	defer l.Close()
	addr := l.Addr().String()
	fmt.Printf("listening on %s\n", addr)
	if cfg.addrFile != "" {
		if err := os.WriteFile(cfg.addrFile, []byte(addr+"\n"), 0o644); err != nil {
			return err
		}
	}
	return serveConns(l, cfg)
}

// serveConns plays the script on each connection (concurrently); with --connections N it
// returns after N, with an error if any of them failed.
func serveConns(l net.Listener, cfg serveConfig) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	failed := 0
	for n := 1; cfg.connections == 0 || n <= cfg.connections; n++ {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		wg.Add(1)
		go func(n int) {
			defer wg.Done()
			err := serveConn(c, n, cfg)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed++
				fmt.Fprintf(os.Stderr, "calico-peer serve: connection %d from %s: FAILED: %v\n", n, c.RemoteAddr(), err)
			} else {
				fmt.Fprintf(os.Stderr, "calico-peer serve: connection %d from %s: script done\n", n, c.RemoteAddr())
			}
		}(n)
	}
	wg.Wait()
	if failed > 0 {
		return fmt.Errorf("%d of %d connections failed", failed, cfg.connections)
	}
	return nil
}

// serverSession is one connection being played.
type serverSession struct {
	cfg      serveConfig
	n        int
	pc       *peerConn
	hello    syncproto.MsgClientHello
	msgs     chan any
	readErr  chan error
	done     chan struct{}
	lastPing time.Time
	closed   bool
}

func serveConn(c net.Conn, n int, cfg serveConfig) error {
	var rec *recorder
	if cfg.record != "" {
		var err error
		if rec, err = newRecorder(filepath.Join(cfg.record, fmt.Sprintf("conn-%d", n))); err != nil {
			c.Close()
			return err
		}
	}
	pc := newPeerConn(c, rec)
	pc.writeTimeout = cfg.writeTimeout
	pc.setLimit(cfg.maxMessage)
	s := &serverSession{cfg: cfg, n: n, pc: pc, msgs: make(chan any), readErr: make(chan error, 1),
		done: make(chan struct{})}
	defer func() {
		close(s.done)
		pc.close()
	}()

	// One reader for the whole connection, as Typha has; the client's stream never restarts.
	go func() {
		for {
			msg, err := pc.receive()
			if err != nil {
				s.readErr <- err
				close(s.msgs)
				return
			}
			select {
			case s.msgs <- msg:
			case <-s.done:
				return
			}
		}
	}()

	// Typha reads the hello within its handshake timeout (for TLS, the handshake happens on
	// this first read).
	msg, err := s.next(cfg.handshakeTimeout)
	if err != nil {
		return fmt.Errorf("reading the client's hello: %w", err)
	}
	hello, ok := msg.(syncproto.MsgClientHello)
	if !ok {
		return fmt.Errorf("the client's first message is %s, not MsgClientHello", syncproto.NameOf(msg))
	}
	s.hello = hello

	for i := range cfg.script {
		st := &cfg.script[i]
		if err := s.play(st); err != nil {
			return fmt.Errorf("%s (%s): %w", st.lineLabel, st.kind, err)
		}
		if s.closed {
			return nil
		}
	}
	// Out of steps: wait for the client to go, answering nothing.
	return s.waitClose(0)
}

// next waits for the client's next message (timeout 0: forever).
func (s *serverSession) next(timeout time.Duration) (any, error) {
	var timer <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		timer = t.C
	}
	select {
	case msg, ok := <-s.msgs:
		if !ok {
			return nil, <-s.readErr
		}
		return msg, nil
	case <-timer:
		return nil, fmt.Errorf("nothing from the client for %v", timeout)
	}
}

// waitClose reads until the client closes the connection; pongs are fine meanwhile.
func (s *serverSession) waitClose(timeout time.Duration) error {
	for {
		msg, err := s.next(timeout)
		if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || isReset(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if _, ok := msg.(syncproto.MsgPong); !ok {
			return fmt.Errorf("unexpected %s from the client", describe(msg))
		}
	}
}

func isReset(err error) bool {
	var ne *net.OpError
	return errors.As(err, &ne) && ne.Op == "read"
}

func (s *serverSession) play(st *step) error {
	pc := s.pc
	switch st.kind {
	case "expectHello":
		return checkHello(s.hello, st.ExpectHello)
	case "serverHello":
		h := syncproto.MsgServerHello{Version: s.cfg.version, SyncerType: s.hello.SyncerType,
			SupportsNodeResourceUpdates: true, ServerConnID: uint64(s.n)}
		if h.SyncerType == "" {
			h.SyncerType = syncproto.SyncerTypeFelix
		}
		sp := st.ServerHello
		if sp.Version != nil {
			h.Version = *sp.Version
		}
		if sp.SyncerType != nil {
			h.SyncerType = syncproto.SyncerType(*sp.SyncerType)
		}
		if sp.SupportsNodeResourceUpdates != nil {
			h.SupportsNodeResourceUpdates = *sp.SupportsNodeResourceUpdates
		}
		if sp.ServerConnID != nil {
			h.ServerConnID = *sp.ServerConnID
		}
		return pc.send(h)
	case "decoderRestart":
		comp := syncproto.CompressionAlgorithm(st.DecoderRestart.Compression)
		text := "enable compression: " + string(comp)
		if comp == "" {
			text = "restart without compression"
		}
		if st.DecoderRestart.Message != nil {
			text = *st.DecoderRestart.Message
		}
		if err := pc.send(syncproto.MsgDecoderRestart{Message: text, CompressionAlgorithm: comp}); err != nil {
			return err
		}
		return s.ackThenRestart(comp, "after the client's ACK")
	case "snapshot":
		if pc.out.comp != syncproto.CompressionSnappy {
			return errors.New("a pre-encoded snapshot needs the stream restarted into snappy first")
		}
		snap, err := encodeSnapshot(st.snapshot, st.perMsg, func(msg any, b []byte) {
			pc.rec.message("out", msg, b)
		})
		if err != nil {
			return err
		}
		if err := pc.writeRaw(snap, regionSnappy, "pre-encoded snapshot: its own snappy stream and gob encoder"); err != nil {
			return err
		}
		return s.ackThenRestart(syncproto.CompressionSnappy, "after the snapshot's ACK")
	case "syncStatus":
		return pc.send(syncproto.MsgSyncStatus{SyncStatus: st.status})
	case "kvs":
		return pc.send(syncproto.MsgKVs{KVs: st.updates})
	case "ping":
		at := st.pingAt
		if at.IsZero() {
			at = time.Now()
		}
		s.lastPing = at
		return pc.send(syncproto.MsgPing{Timestamp: at})
	case "expectPong":
		msg, err := s.next(s.cfg.ackTimeout)
		if err != nil {
			return err
		}
		pong, ok := msg.(syncproto.MsgPong)
		if !ok {
			return fmt.Errorf("expected MsgPong, got %s", describe(msg))
		}
		if !pong.PingTimestamp.Equal(s.lastPing) {
			return fmt.Errorf("MsgPong echoes %v, the ping said %v", pong.PingTimestamp, s.lastPing)
		}
		return nil
	case "sleep":
		time.Sleep(st.sleep)
		return nil
	case "rawHex":
		return pc.writeRaw(st.raw, regionRaw, "rawHex step")
	case "close":
		s.closed = true
		return nil
	case "expectClose":
		if err := s.waitClose(s.cfg.ackTimeout); err != nil {
			return fmt.Errorf("waiting for the client to close: %w", err)
		}
		s.closed = true
		return nil
	}
	return fmt.Errorf("unknown step %q", st.kind)
}

// ackThenRestart waits for the MsgACK (the next client message must be it, as in Typha) and
// starts the next outgoing gob stream.
func (s *serverSession) ackThenRestart(comp syncproto.CompressionAlgorithm, why string) error {
	msg, err := s.next(s.cfg.ackTimeout)
	if err != nil {
		return fmt.Errorf("waiting for MsgACK: %w", err)
	}
	if _, ok := msg.(syncproto.MsgACK); !ok {
		return fmt.Errorf("expected MsgACK, got %s", describe(msg))
	}
	return s.pc.restartEncoder(comp, why)
}

// encodeSnapshot builds Typha's pre-encoded snapshot: a complete snappy stream from a fresh
// gob encoder, MsgKVs of up to perMsg KVs each, ending with MsgDecoderRestart into snappy,
// flushed only at the end (as Typha writes it). Typha builds it once and writes the same bytes
// to every client that joins meanwhile. onMsg, if set, gets each message and its gob bytes.
func encodeSnapshot(kvs []syncproto.SerializedUpdate, perMsg int, onMsg func(any, []byte)) ([]byte, error) {
	var buf, last bytes.Buffer
	sw := snappy.NewBufferedWriter(&buf)
	enc := gob.NewEncoder(io.MultiWriter(sw, &last))
	send := func(msg any) error {
		last.Reset()
		if err := enc.Encode(&syncproto.Envelope{Message: msg}); err != nil {
			return err
		}
		if onMsg != nil {
			onMsg(msg, bytes.Clone(last.Bytes()))
		}
		return nil
	}
	for start := 0; start < len(kvs); start += perMsg {
		end := min(start+perMsg, len(kvs))
		if err := send(syncproto.MsgKVs{KVs: kvs[start:end]}); err != nil {
			return nil, err
		}
	}
	if err := send(syncproto.MsgDecoderRestart{
		Message: snapshotEndText, CompressionAlgorithm: syncproto.CompressionSnappy}); err != nil {
		return nil, err
	}
	if err := sw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// The texts Typha v3.32 puts in its MsgDecoderRestart messages (informational; clients do not
// read them). Using the same keeps our sessions the same length as Typha's.
const (
	restartForSnapshotText = "enable compression: snappy;send binary snapshot"
	snapshotEndText        = "End of compressed snapshot."
)

func checkHello(h syncproto.MsgClientHello, e *helloExpect) error {
	var bad []string
	chk := func(name string, ok bool, got any) {
		if !ok {
			bad = append(bad, fmt.Sprintf("%s is %v", name, got))
		}
	}
	if e.Hostname != nil {
		chk("hostname", h.Hostname == *e.Hostname, h.Hostname)
	}
	if e.Info != nil {
		chk("info", h.Info == *e.Info, h.Info)
	}
	if e.Version != nil {
		chk("version", h.Version == *e.Version, h.Version)
	}
	if e.SyncerType != nil {
		chk("syncerType", string(h.SyncerType) == *e.SyncerType, h.SyncerType)
	}
	if e.SupportsDecoderRestart != nil {
		chk("supportsDecoderRestart", h.SupportsDecoderRestart == *e.SupportsDecoderRestart, h.SupportsDecoderRestart)
	}
	if e.SupportsModernPolicyKeys != nil {
		chk("supportsModernPolicyKeys", h.SupportsModernPolicyKeys == *e.SupportsModernPolicyKeys, h.SupportsModernPolicyKeys)
	}
	if e.SupportedCompressionAlgorithms != nil {
		same := len(h.SupportedCompressionAlgorithms) == len(*e.SupportedCompressionAlgorithms)
		for i := 0; same && i < len(h.SupportedCompressionAlgorithms); i++ {
			same = string(h.SupportedCompressionAlgorithms[i]) == (*e.SupportedCompressionAlgorithms)[i]
		}
		chk("supportedCompressionAlgorithms", same, h.SupportedCompressionAlgorithms)
	}
	if len(bad) > 0 {
		return fmt.Errorf("the client's hello does not match: %v", bad)
	}
	return nil
}
