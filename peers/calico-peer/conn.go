package main

// One side of a Typha-protocol connection: gob streams that restart (optionally into snappy)
// when a MsgDecoderRestart is acknowledged, deadlines per message as Calico sets them, and
// the optional recording of every byte (--record).

import (
	"bufio"
	"bytes"
	"encoding/gob"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/golang/snappy"

	"typha-rs/peers/calico-peer/syncproto"
)

// outStream is one outgoing gob stream: a fresh gob encoder, inside a fresh snappy writer if
// compressed. Every message is flushed on its own, as Typha does, so with snappy each message
// is one chunk (or more past 64 KiB).
type outStream struct {
	comp syncproto.CompressionAlgorithm
	sw   *snappy.Writer
	enc  *gob.Encoder
	last bytes.Buffer
}

func newOutStream(w io.Writer, comp syncproto.CompressionAlgorithm) (*outStream, error) {
	s := &outStream{comp: comp}
	dst := w
	switch comp {
	case "":
	case syncproto.CompressionSnappy:
		s.sw = snappy.NewBufferedWriter(w)
		dst = s.sw
	default:
		return nil, fmt.Errorf("unknown compression algorithm %q", comp)
	}
	s.enc = gob.NewEncoder(io.MultiWriter(dst, &s.last))
	return s, nil
}

// encode writes one message and returns its gob bytes (type definitions included, if this
// is the first message of its type on the stream).
func (s *outStream) encode(msg any) ([]byte, error) {
	s.last.Reset()
	if err := s.enc.Encode(&syncproto.Envelope{Message: msg}); err != nil {
		return nil, err
	}
	if s.sw != nil {
		if err := s.sw.Flush(); err != nil {
			return nil, err
		}
	}
	return bytes.Clone(s.last.Bytes()), nil
}

// consumeTee sits between a gob decoder and its source and keeps the bytes the decoder
// consumes, so each message's exact bytes are known. It is an io.ByteReader, so gob adds no
// buffering of its own on top (which would read ahead past a decoder restart).
type consumeTee struct {
	r interface {
		io.Reader
		io.ByteReader
	}
	buf   bytes.Buffer
	limit int // per message; 0: none
}

var errMessageTooBig = errors.New("inbound message exceeds the size limit")

func (t *consumeTee) Read(p []byte) (int, error) {
	if t.limit > 0 && t.buf.Len()+len(p) > t.limit {
		if t.buf.Len() >= t.limit {
			return 0, fmt.Errorf("%w (%d bytes)", errMessageTooBig, t.limit)
		}
		p = p[:t.limit-t.buf.Len()]
	}
	n, err := t.r.Read(p)
	t.buf.Write(p[:n])
	return n, err
}

func (t *consumeTee) ReadByte() (byte, error) {
	if t.limit > 0 && t.buf.Len() >= t.limit {
		return 0, fmt.Errorf("%w (%d bytes)", errMessageTooBig, t.limit)
	}
	c, err := t.r.ReadByte()
	if err == nil {
		t.buf.WriteByte(c)
	}
	return c, err
}

// countingConn counts (and, when recording, keeps) the bytes that cross the socket.
type countingConn struct {
	net.Conn
	in, out   int
	keep      bool
	wireIn    bytes.Buffer
	wireOut   bytes.Buffer
	regionsIn []region
	// regionsOut starts with the plain gob stream.
	regionsOut []region
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.in += n
	if c.keep {
		c.wireIn.Write(p[:n])
	}
	return n, err
}

func (c *countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.out += n
	if c.keep {
		c.wireOut.Write(p[:n])
	}
	return n, err
}

// peerConn is one connection as either side sees it.
type peerConn struct {
	raw *countingConn
	br  *bufio.Reader
	bw  *bufio.Writer
	out *outStream
	dec *gob.Decoder
	tee *consumeTee
	inZ syncproto.CompressionAlgorithm
	rec *recorder
	// readTimeout and writeTimeout bound each message; 0: none.
	readTimeout, writeTimeout time.Duration
	maxMessage                int
}

func newPeerConn(c net.Conn, rec *recorder) *peerConn {
	raw := &countingConn{Conn: c, keep: rec != nil}
	raw.regionsIn = []region{{0, regionGob, "the first gob stream"}}
	raw.regionsOut = []region{{0, regionGob, "the first gob stream"}}
	p := &peerConn{raw: raw, br: bufio.NewReader(raw), bw: bufio.NewWriter(raw), rec: rec}
	// Neither can fail: no compression.
	p.out, _ = newOutStream(p.bw, "")
	p.restartDecoder("")
	return p
}

// send encodes one message on the current outgoing stream and flushes it to the socket.
func (p *peerConn) send(msg any) error {
	if p.writeTimeout > 0 {
		if err := p.raw.SetWriteDeadline(time.Now().Add(p.writeTimeout)); err != nil {
			return err
		}
	}
	b, err := p.out.encode(msg)
	if err == nil {
		err = p.bw.Flush()
	}
	if err != nil {
		return fmt.Errorf("sending %s: %w", syncproto.NameOf(msg), err)
	}
	p.rec.message("out", msg, b)
	return nil
}

// writeRaw writes bytes outside the current gob stream (a pre-encoded snapshot, or a
// script's raw bytes), after flushing what is buffered.
func (p *peerConn) writeRaw(b []byte, kind streamKind, why string) error {
	if err := p.bw.Flush(); err != nil {
		return err
	}
	p.raw.regionsOut = append(p.raw.regionsOut, region{p.raw.out, kind, why})
	if p.writeTimeout > 0 {
		if err := p.raw.SetWriteDeadline(time.Now().Add(p.writeTimeout)); err != nil {
			return err
		}
	}
	if _, err := p.bw.Write(b); err != nil {
		return err
	}
	return p.bw.Flush()
}

// restartEncoder starts a new outgoing gob stream (after the peer's ACK).
func (p *peerConn) restartEncoder(comp syncproto.CompressionAlgorithm, why string) error {
	if err := p.bw.Flush(); err != nil {
		return err
	}
	s, err := newOutStream(p.bw, comp)
	if err != nil {
		return err
	}
	p.out = s
	kind := regionGob
	if comp == syncproto.CompressionSnappy {
		kind = regionSnappy
	}
	p.raw.regionsOut = append(p.raw.regionsOut, region{p.raw.out, kind, why})
	return nil
}

// restartDecoder starts reading a new incoming gob stream at the current position. The
// connection's one bufio.Reader keeps whatever was read ahead, so nothing is lost.
func (p *peerConn) restartDecoder(comp syncproto.CompressionAlgorithm) {
	var src interface {
		io.Reader
		io.ByteReader
	} = p.br
	kind := regionGob
	if comp == syncproto.CompressionSnappy {
		src = snappy.NewReader(p.br)
		kind = regionSnappy
	}
	p.tee = &consumeTee{r: src, limit: p.maxMessage}
	p.dec = gob.NewDecoder(p.tee)
	p.inZ = comp
	if p.raw.in > 0 {
		why := "after MsgDecoderRestart, no compression"
		if comp != "" {
			why = "after MsgDecoderRestart, " + string(comp)
		}
		p.raw.regionsIn = append(p.raw.regionsIn, region{p.raw.in - p.br.Buffered(), kind, why})
	}
}

// setLimit sets the per-message size limit of the incoming stream.
func (p *peerConn) setLimit(n int) {
	p.maxMessage = n
	p.tee.limit = n
}

// receive decodes the next message.
func (p *peerConn) receive() (any, error) {
	if p.readTimeout > 0 {
		if err := p.raw.SetReadDeadline(time.Now().Add(p.readTimeout)); err != nil {
			return nil, err
		}
	}
	p.tee.buf.Reset()
	var env syncproto.Envelope
	if err := p.dec.Decode(&env); err != nil {
		return nil, err
	}
	if env.Message == nil {
		return nil, errors.New("received an Envelope with no message")
	}
	p.rec.message("in", env.Message, p.tee.buf.Bytes())
	return env.Message, nil
}

func (p *peerConn) close() error {
	p.rec.finish(p.raw)
	return p.raw.Close()
}

// recorder writes what --record asks for: every message's gob bytes as its own file, the
// whole byte streams in both directions, and an annotated listing of each stream.
type recorder struct {
	dir   string
	seq   int
	index bytes.Buffer
	err   error
}

func newRecorder(dir string) (*recorder, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return &recorder{dir: dir}, nil
}

func (r *recorder) message(dir string, msg any, gobBytes []byte) {
	if r == nil || r.err != nil {
		return
	}
	r.seq++
	name := fmt.Sprintf("%04d-%s-%s.gob", r.seq, dir, syncproto.NameOf(msg))
	fmt.Fprintf(&r.index, "%s  %d bytes  %s\n", name, len(gobBytes), describe(msg))
	r.err = os.WriteFile(filepath.Join(r.dir, name), gobBytes, 0o644)
}

func (r *recorder) finish(c *countingConn) {
	if r == nil {
		return
	}
	write := func(name string, b []byte) {
		if r.err == nil {
			r.err = os.WriteFile(filepath.Join(r.dir, name), b, 0o644)
		}
	}
	write("messages.txt", r.index.Bytes())
	write("wire-in.bin", c.wireIn.Bytes())
	write("wire-out.bin", c.wireOut.Bytes())
	write("wire-in.txt", []byte(annotate(c.wireIn.Bytes(), c.regionsIn)))
	write("wire-out.txt", []byte(annotate(c.wireOut.Bytes(), c.regionsOut)))
	if r.err != nil {
		fmt.Fprintf(os.Stderr, "calico-peer: recording into %s: %v\n", r.dir, r.err)
	}
}

// describe is a short human-readable form of a message for logs and indexes.
func describe(msg any) string {
	switch m := msg.(type) {
	case syncproto.MsgKVs:
		return fmt.Sprintf("MsgKVs{%d KVs}", len(m.KVs))
	case syncproto.MsgSyncStatus:
		return "MsgSyncStatus{" + m.SyncStatus.String() + "}"
	case syncproto.MsgPing:
		return "MsgPing{" + m.Timestamp.Format(time.RFC3339Nano) + "}"
	case syncproto.MsgPong:
		return "MsgPong{" + m.PingTimestamp.Format(time.RFC3339Nano) + "}"
	default:
		return fmt.Sprintf("%T%+v", msg, msg)
	}
}
