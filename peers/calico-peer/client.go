package main

// calico-peer client: connects to a Typha-protocol server as calico-node v3.32 does (the
// hello it sends, decoder restart into snappy, ACKs, pongs), applies the KVs to a map and
// writes the end state and a summary as JSON.

import (
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"time"
	"unicode/utf8"

	"typha-rs/peers/calico-peer/syncproto"
)

type clientConfig struct {
	addr         string
	syncer       syncproto.SyncerType
	hostname     string
	info         string
	version      string
	connID       uint64
	tls          tlsFiles
	untilInSync  bool
	duration     time.Duration
	out          string
	record       string
	noRestart    bool
	noCompress   bool
	noModernKeys bool
	readTimeout  time.Duration
	writeTimeout time.Duration
	dialTimeout  time.Duration
	quiet        bool
}

// parseClientFlags is the client's command line, checked; a usageError on anything wrong.
func parseClientFlags(args []string) (clientConfig, error) {
	var c clientConfig
	fs := flag.NewFlagSet("client", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	host, _ := os.Hostname()
	syncer := fs.String("syncer", "felix", "syncer type: felix, bgp, tunnel-ip-allocation or node-status")
	fs.StringVar(&c.addr, "addr", "", "server address host:port (required)")
	fs.StringVar(&c.hostname, "hostname", host, "Hostname sent in the hello")
	fs.StringVar(&c.info, "info", "calico-peer (typha-rs reference peer)", "Info sent in the hello")
	fs.StringVar(&c.version, "version", "v3.32.0", "Version sent in the hello")
	connID := fs.Uint64("conn-id", 0, "ClientConnID sent in the hello (default: random<<32 + 1, as Calico)")
	fs.StringVar(&c.tls.ca, "ca", "", "CA certificate (PEM) the server's chain must lead to")
	fs.StringVar(&c.tls.cert, "cert", "", "client certificate (PEM)")
	fs.StringVar(&c.tls.key, "key", "", "client key (PEM)")
	fs.StringVar(&c.tls.peerCN, "server-cn", "", "required server certificate CN")
	fs.StringVar(&c.tls.peerURISAN, "server-uri-san", "", "required server certificate URI SAN")
	fs.BoolVar(&c.untilInSync, "until-in-sync", false, "exit once the server says InSync")
	fs.DurationVar(&c.duration, "duration", 0, "run this long (with --until-in-sync: fail if not InSync by then)")
	fs.StringVar(&c.out, "out", "", "write the end state and summary here as JSON")
	fs.StringVar(&c.record, "record", "", "write every message's bytes and both byte streams into this directory")
	fs.BoolVar(&c.noCompress, "no-compression", false, "offer no compression algorithm (decoder restart still offered)")
	fs.BoolVar(&c.noRestart, "no-decoder-restart", false, "do not offer decoder restart (nor, so, compression)")
	fs.BoolVar(&c.noModernKeys, "no-modern-policy-keys", false, "do not claim SupportsModernPolicyKeys (Typha v3.32 refuses such clients)")
	fs.DurationVar(&c.readTimeout, "read-timeout", 30*time.Second, "longest wait for any message (Felix's default)")
	fs.DurationVar(&c.writeTimeout, "write-timeout", 10*time.Second, "longest write of one message")
	fs.DurationVar(&c.dialTimeout, "dial-timeout", 10*time.Second, "connect timeout")
	fs.BoolVar(&c.quiet, "quiet", false, "no summary line on stderr")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(os.Stdout)
			fs.PrintDefaults()
			os.Exit(0)
		}
		return c, usagef("client: %v", err)
	}
	if fs.NArg() > 0 {
		return c, usagef("client: unexpected argument %q", fs.Arg(0))
	}
	if c.addr == "" {
		return c, usagef("client: --addr is required")
	}
	if _, _, err := net.SplitHostPort(c.addr); err != nil {
		return c, usagef("client: --addr %q: %v", c.addr, err)
	}
	c.syncer = syncproto.SyncerType(*syncer)
	known := false
	for _, t := range syncproto.AllSyncerTypes {
		known = known || t == c.syncer
	}
	if !known {
		return c, usagef("client: --syncer %q: want felix, bgp, tunnel-ip-allocation or node-status", *syncer)
	}
	if err := c.tls.check("client", "--server-cn", "--server-uri-san"); err != nil {
		return c, err
	}
	c.connID = *connID
	if c.connID == 0 {
		c.connID = rand.Uint64()<<32 + 1
	}
	if c.readTimeout <= 0 || c.writeTimeout <= 0 || c.dialTimeout <= 0 || c.duration < 0 {
		return c, usagef("client: timeouts and --duration must be positive")
	}
	return c, nil
}

// kvEntry is one key of the end state.
type kvEntry struct {
	// Value is the value's bytes as a string (JSON for most keys, a raw string for config,
	// IP and ready-flag keys); ValueBase64 replaces it when the bytes are not UTF-8.
	Value       string `json:"value"`
	ValueBase64 string `json:"valueBase64,omitempty"`
	// Revision is the revision as Calico's client turns it into a string; RevisionType is the
	// gob name of what the interface carried ("string" from Calico; "nil" when absent).
	Revision          string `json:"revision"`
	RevisionType      string `json:"revisionType"`
	V3ResourceVersion string `json:"v3ResourceVersion,omitempty"`
	TTLNanos          int64  `json:"ttlNanos,omitempty"`
	UpdateType        string `json:"updateType"`
}

type restartJSON struct {
	Message     string `json:"message"`
	Compression string `json:"compression"`
}

type helloJSON struct {
	Version                     string `json:"version"`
	SyncerType                  string `json:"syncerType"`
	SupportsNodeResourceUpdates bool   `json:"supportsNodeResourceUpdates"`
	ServerConnID                uint64 `json:"serverConnID"`
}

type clientSummary struct {
	Server            string         `json:"server"`
	TLS               bool           `json:"tls"`
	Offered           any            `json:"clientHello"`
	ServerHello       *helloJSON     `json:"serverHello"`
	StatusTransitions []string       `json:"statusTransitions"`
	InSync            bool           `json:"inSync"`
	KVsBeforeInSync   int            `json:"kvsBeforeFirstInSync"`
	KVsReceived       int            `json:"kvsReceived"`
	Deletions         int            `json:"deletionsReceived"`
	MessagesReceived  map[string]int `json:"messagesReceived"`
	MessagesSent      map[string]int `json:"messagesSent"`
	DecoderRestarts   []restartJSON  `json:"decoderRestarts"`
	DecoderRestarted  bool           `json:"decoderRestarted"`
	Compression       string         `json:"compressionAtEnd"`
	BytesReceived     int            `json:"bytesReceived"`
	BytesSent         int            `json:"bytesSent"`
	EndReason         string         `json:"endReason"`
	Error             string         `json:"error,omitempty"`
}

type clientOutput struct {
	SyncerType string             `json:"syncerType"`
	KVs        map[string]kvEntry `json:"kvs"`
	Summary    clientSummary      `json:"summary"`
}

func runClient(args []string) error {
	cfg, err := parseClientFlags(args)
	if err != nil {
		return err
	}
	out, err := clientSession(cfg)
	if cfg.out != "" {
		b, jerr := json.MarshalIndent(out, "", "  ")
		if jerr == nil {
			jerr = os.WriteFile(cfg.out, append(b, '\n'), 0o644)
		}
		if jerr != nil && err == nil {
			err = jerr
		}
	}
	if !cfg.quiet {
		s := out.Summary
		fmt.Fprintf(os.Stderr, "calico-peer client: %s: %d keys, %d KVs received (%d deletions), statuses %v, decoder restarts %d, end: %s\n",
			cfg.syncer, len(out.KVs), s.KVsReceived, s.Deletions, s.StatusTransitions, len(s.DecoderRestarts), s.EndReason)
	}
	return err
}

// clientSession runs one connection; the output is filled in as far as it got, error or not.
func clientSession(cfg clientConfig) (*clientOutput, error) {
	out := &clientOutput{SyncerType: string(cfg.syncer), KVs: map[string]kvEntry{}}
	s := &out.Summary
	s.Server = cfg.addr
	s.MessagesReceived = map[string]int{}
	s.MessagesSent = map[string]int{}
	s.StatusTransitions = []string{}
	s.DecoderRestarts = []restartJSON{}
	fail := func(err error) (*clientOutput, error) {
		s.EndReason = "error"
		s.Error = err.Error()
		return out, err
	}

	var conn net.Conn
	var err error
	dialer := &net.Dialer{Timeout: cfg.dialTimeout}
	if cfg.tls.enabled() {
		s.TLS = true
		var tc *tls.Config
		if tc, err = cfg.tls.clientConfig(); err != nil {
			return fail(err)
		}
		conn, err = tls.DialWithDialer(dialer, "tcp", cfg.addr, tc)
	} else {
		conn, err = dialer.Dial("tcp", cfg.addr)
	}
	if err != nil {
		return fail(fmt.Errorf("connecting to %s: %w", cfg.addr, err))
	}
	var rec *recorder
	if cfg.record != "" {
		if rec, err = newRecorder(cfg.record); err != nil {
			conn.Close()
			return fail(err)
		}
	}
	pc := newPeerConn(conn, rec)
	defer func() {
		s.BytesReceived, s.BytesSent = pc.raw.in, pc.raw.out
		s.Compression = string(pc.inZ)
		pc.close()
	}()
	pc.writeTimeout = cfg.writeTimeout

	// The hello, as calico-node v3.32's syncclient fills it.
	comp := []syncproto.CompressionAlgorithm{syncproto.CompressionSnappy}
	if cfg.noRestart || cfg.noCompress {
		comp = nil
	}
	hello := syncproto.MsgClientHello{
		Hostname:                       cfg.hostname,
		Info:                           cfg.info,
		Version:                        cfg.version,
		SyncerType:                     cfg.syncer,
		SupportsDecoderRestart:         !cfg.noRestart,
		SupportedCompressionAlgorithms: comp,
		SupportsModernPolicyKeys:       !cfg.noModernKeys,
		ClientConnID:                   cfg.connID,
	}
	s.Offered = hello
	send := func(msg any) error {
		s.MessagesSent[syncproto.NameOf(msg)]++
		return pc.send(msg)
	}
	if err := send(hello); err != nil {
		return fail(err)
	}

	var end time.Time
	if cfg.duration > 0 {
		end = time.Now().Add(cfg.duration)
	}
	// receive applies the read timeout, and the --duration end, to each message.
	receive := func() (any, bool, error) {
		dl := time.Now().Add(cfg.readTimeout)
		byEnd := !end.IsZero() && end.Before(dl)
		if byEnd {
			dl = end
		}
		if err := pc.raw.SetReadDeadline(dl); err != nil {
			return nil, false, err
		}
		msg, err := pc.receive()
		var ne net.Error
		if err != nil && errors.As(err, &ne) && ne.Timeout() {
			if byEnd {
				return nil, true, nil
			}
			return nil, false, fmt.Errorf("no message from the server for %v (read timeout): %w", cfg.readTimeout, err)
		}
		if err == nil {
			s.MessagesReceived[syncproto.NameOf(msg)]++
		}
		return msg, false, err
	}

	msg, _, err := receive()
	if err != nil {
		return fail(fmt.Errorf("reading the server's hello: %w", err))
	}
	sh, ok := msg.(syncproto.MsgServerHello)
	if !ok {
		return fail(fmt.Errorf("protocol error: the server's first message is %s, not MsgServerHello", syncproto.NameOf(msg)))
	}
	s.ServerHello = &helloJSON{sh.Version, string(sh.SyncerType), sh.SupportsNodeResourceUpdates, sh.ServerConnID}
	if !sh.SupportsNodeResourceUpdates {
		return fail(errors.New("protocol error: MsgServerHello without SupportsNodeResourceUpdates (calico-node v3.32 disconnects)"))
	}
	serverType := sh.SyncerType
	if serverType == "" {
		serverType = syncproto.SyncerTypeFelix
	}
	if serverType != cfg.syncer {
		return fail(fmt.Errorf("protocol error: asked for syncer %q, the server answered %q", cfg.syncer, sh.SyncerType))
	}

	for {
		msg, timeUp, err := receive()
		if timeUp {
			if cfg.untilInSync && !s.InSync {
				return fail(fmt.Errorf("not InSync after --duration %v", cfg.duration))
			}
			s.EndReason = "duration"
			return out, nil
		}
		if errors.Is(err, io.EOF) {
			if (cfg.untilInSync && !s.InSync) || cfg.duration > 0 {
				return fail(errors.New("the server closed the connection"))
			}
			s.EndReason = "server closed the connection"
			return out, nil
		}
		if err != nil {
			return fail(fmt.Errorf("reading from the server: %w", err))
		}
		switch m := msg.(type) {
		case syncproto.MsgKVs:
			for _, u := range m.KVs {
				s.KVsReceived++
				if !s.InSync {
					s.KVsBeforeInSync++
				}
				if len(u.Value) == 0 {
					s.Deletions++
					delete(out.KVs, u.Key)
					continue
				}
				out.KVs[u.Key] = entryOf(u)
			}
		case syncproto.MsgSyncStatus:
			s.StatusTransitions = append(s.StatusTransitions, m.SyncStatus.String())
			if m.SyncStatus == syncproto.InSync {
				s.InSync = true
				if cfg.untilInSync {
					s.EndReason = "in-sync"
					return out, nil
				}
			}
		case syncproto.MsgPing:
			if err := send(syncproto.MsgPong{PingTimestamp: m.Timestamp}); err != nil {
				return fail(err)
			}
		case syncproto.MsgDecoderRestart:
			if cfg.noRestart {
				return fail(errors.New("protocol error: MsgDecoderRestart, but we did not offer decoder restart"))
			}
			if m.CompressionAlgorithm != "" && m.CompressionAlgorithm != syncproto.CompressionSnappy {
				return fail(fmt.Errorf("protocol error: MsgDecoderRestart with unknown compression %q", m.CompressionAlgorithm))
			}
			if m.CompressionAlgorithm != "" && cfg.noCompress {
				return fail(fmt.Errorf("protocol error: MsgDecoderRestart to %q, but we offered no compression", m.CompressionAlgorithm))
			}
			s.DecoderRestarts = append(s.DecoderRestarts, restartJSON{m.Message, string(m.CompressionAlgorithm)})
			s.DecoderRestarted = true
			pc.restartDecoder(m.CompressionAlgorithm)
			if err := send(syncproto.MsgACK{}); err != nil {
				return fail(err)
			}
		case syncproto.MsgServerHello:
			return fail(errors.New("protocol error: a second MsgServerHello"))
		default:
			// Calico's client ignores other message types (ACK, ClientHello, Pong from a
			// server); they are counted in messagesReceived.
		}
	}
}

func entryOf(u syncproto.SerializedUpdate) kvEntry {
	e := kvEntry{V3ResourceVersion: u.V3ResourceVersion, TTLNanos: int64(u.TTL), UpdateType: u.UpdateType.String()}
	if utf8.Valid(u.Value) {
		e.Value = string(u.Value)
	} else {
		e.ValueBase64 = base64.StdEncoding.EncodeToString(u.Value)
	}
	switch r := u.Revision.(type) {
	case nil:
		e.RevisionType = "nil"
	case string:
		e.Revision, e.RevisionType = r, "string"
	default:
		e.Revision, e.RevisionType = fmt.Sprintf("%v", r), fmt.Sprintf("%T", r)
	}
	return e
}
