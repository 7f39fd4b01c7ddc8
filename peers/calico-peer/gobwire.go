package main

// What encoding/gob and the snappy framing format put on the wire, written out by hand: the
// primitive encodings, type definitions (the "preamble" a server can send once per stream so
// that every value after it is byte-identical on every stream), snappy chunks, and an
// annotator that splits a recorded stream into its type definitions and values. The golden
// test checks all of it against what encoding/gob and github.com/golang/snappy produce.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"strings"

	"github.com/golang/snappy"
)

// appendUint is gob's unsigned integer: below 128 one byte; otherwise the byte count, negated,
// then the big-endian bytes without leading zeros.
func appendUint(b []byte, x uint64) []byte {
	if x < 128 {
		return append(b, byte(x))
	}
	var buf [8]byte
	binary.BigEndian.PutUint64(buf[:], x)
	i := 0
	for buf[i] == 0 {
		i++
	}
	b = append(b, byte(-(8 - i)))
	return append(b, buf[i:]...)
}

// appendInt is gob's signed integer: the sign in the low bit, then as appendUint.
func appendInt(b []byte, i int64) []byte {
	var x uint64
	if i < 0 {
		x = uint64(^i<<1) | 1
	} else {
		x = uint64(i << 1)
	}
	return appendUint(b, x)
}

var errShort = errors.New("truncated")

func readUint(b []byte) (uint64, int, error) {
	if len(b) == 0 {
		return 0, 0, errShort
	}
	if b[0] < 128 {
		return uint64(b[0]), 1, nil
	}
	n := -int(int8(b[0]))
	if n < 1 || n > 8 {
		return 0, 0, fmt.Errorf("bad uint length byte %#x", b[0])
	}
	if len(b) < 1+n {
		return 0, 0, errShort
	}
	var x uint64
	for _, d := range b[1 : 1+n] {
		x = x<<8 | uint64(d)
	}
	return x, 1 + n, nil
}

func readInt(b []byte) (int64, int, error) {
	x, n, err := readUint(b)
	if err != nil {
		return 0, 0, err
	}
	if x&1 != 0 {
		return ^int64(x >> 1), n, nil
	}
	return int64(x >> 1), n, nil
}

// frameGob puts gob's length prefix in front of one message body.
func frameGob(body []byte) []byte {
	return append(appendUint(nil, uint64(len(body))), body...)
}

// gob's predefined type ids used by our messages.
const (
	gobBool      = 1
	gobInt       = 2
	gobUint      = 3
	gobBytes     = 5
	gobString    = 6
	gobInterface = 8
)

type defKind int

const (
	structDef defKind = iota
	sliceDef
	gobEncoderDef
)

type fieldDef struct {
	Name string
	ID   int
}

// typeDef is one gob type definition: the body of the message [-id][wireType].
type typeDef struct {
	ID     int
	Kind   defKind
	Name   string
	Fields []fieldDef // structDef
	Elem   int        // sliceDef
}

// wire encodes the definition as gob does: -id, then the wireType struct with only the field
// for this kind set (StructT is field 3, SliceT 2, GobEncoderT 5), each nested struct as
// field-number deltas ending in 0, empty slices left out.
func (d typeDef) wire() []byte {
	b := appendInt(nil, -int64(d.ID))
	common := func(b []byte) []byte {
		b = append(b, 1, 1) // kind type's field 1 (CommonType); CommonType field 1 (Name)
		b = appendUint(b, uint64(len(d.Name)))
		b = append(b, d.Name...)
		b = append(b, 1) // CommonType field 2 (Id)
		b = appendInt(b, int64(d.ID))
		return append(b, 0)
	}
	switch d.Kind {
	case structDef:
		b = append(b, 3)
		b = common(b)
		if len(d.Fields) > 0 {
			b = append(b, 1) // structType field 2 (Field)
			b = appendUint(b, uint64(len(d.Fields)))
			for _, f := range d.Fields {
				b = append(b, 1)
				b = appendUint(b, uint64(len(f.Name)))
				b = append(b, f.Name...)
				b = append(b, 1)
				b = appendInt(b, int64(f.ID))
				b = append(b, 0)
			}
		}
		b = append(b, 0)
	case sliceDef:
		b = append(b, 2)
		b = common(b)
		b = append(b, 1) // sliceType field 2 (Elem)
		b = appendInt(b, int64(d.Elem))
		b = append(b, 0)
	case gobEncoderDef:
		b = append(b, 5)
		b = common(b)
		b = append(b, 0)
	}
	return append(b, 0)
}

// The type ids this program's encoding/gob gives our types (fixed by the warm-up in
// syncproto's init). TestTypeTable checks them against what gob emits.
const (
	idEnvelope           = 64
	idMsgClientHello     = 65
	idCompressionAlgs    = 66
	idMsgServerHello     = 67
	idMsgDecoderRestart  = 68
	idMsgACK             = 69
	idMsgSyncStatus      = 70
	idMsgPing            = 71
	idTime               = 72
	idMsgPong            = 73
	idMsgKVs             = 74
	idSerializedUpdate   = 75
	idSerializedUpdates  = 76
	firstUnusedGobTypeID = 77
)

// typeDefs are the definitions of every type either side sends, by id.
var typeDefs = map[int]typeDef{
	idEnvelope: {ID: idEnvelope, Kind: structDef, Name: "Envelope", Fields: []fieldDef{
		{"Message", gobInterface}}},
	idMsgClientHello: {ID: idMsgClientHello, Kind: structDef, Name: "MsgClientHello", Fields: []fieldDef{
		{"Hostname", gobString}, {"Info", gobString}, {"Version", gobString},
		{"SyncerType", gobString}, {"SupportsDecoderRestart", gobBool},
		{"SupportedCompressionAlgorithms", idCompressionAlgs},
		{"SupportsModernPolicyKeys", gobBool}, {"ClientConnID", gobUint}}},
	idCompressionAlgs: {ID: idCompressionAlgs, Kind: sliceDef,
		Name: "[]syncproto.CompressionAlgorithm", Elem: gobString},
	idMsgServerHello: {ID: idMsgServerHello, Kind: structDef, Name: "MsgServerHello", Fields: []fieldDef{
		{"Version", gobString}, {"SyncerType", gobString},
		{"SupportsNodeResourceUpdates", gobBool}, {"ServerConnID", gobUint}}},
	idMsgDecoderRestart: {ID: idMsgDecoderRestart, Kind: structDef, Name: "MsgDecoderRestart", Fields: []fieldDef{
		{"Message", gobString}, {"CompressionAlgorithm", gobString}}},
	idMsgACK: {ID: idMsgACK, Kind: structDef, Name: "MsgACK"},
	idMsgSyncStatus: {ID: idMsgSyncStatus, Kind: structDef, Name: "MsgSyncStatus", Fields: []fieldDef{
		{"SyncStatus", gobUint}}},
	idMsgPing: {ID: idMsgPing, Kind: structDef, Name: "MsgPing", Fields: []fieldDef{
		{"Timestamp", idTime}}},
	idTime: {ID: idTime, Kind: gobEncoderDef, Name: "Time"},
	idMsgPong: {ID: idMsgPong, Kind: structDef, Name: "MsgPong", Fields: []fieldDef{
		{"PingTimestamp", idTime}, {"PongTimestamp", idTime}}},
	idMsgKVs: {ID: idMsgKVs, Kind: structDef, Name: "MsgKVs", Fields: []fieldDef{
		{"KVs", idSerializedUpdates}}},
	idSerializedUpdates: {ID: idSerializedUpdates, Kind: sliceDef,
		Name: "[]syncproto.SerializedUpdate", Elem: idSerializedUpdate},
	idSerializedUpdate: {ID: idSerializedUpdate, Kind: structDef, Name: "SerializedUpdate", Fields: []fieldDef{
		{"Key", gobString}, {"Value", gobBytes}, {"Revision", gobInterface},
		{"V3ResourceVersion", gobString}, {"TTL", gobInt}, {"UpdateType", gobUint}}},
}

// Which definitions each side's preamble carries, in order: every type that side sends.
var (
	serverPreambleIDs = []int{idEnvelope, idMsgServerHello, idMsgDecoderRestart, idMsgSyncStatus,
		idMsgPing, idTime, idMsgKVs, idSerializedUpdates, idSerializedUpdate}
	clientPreambleIDs = []int{idEnvelope, idMsgClientHello, idCompressionAlgs, idMsgACK,
		idMsgPong, idTime}
)

// preamble gives the type definitions as consecutive gob messages: a stream that starts with
// them needs no definition later, so each value after them has the same bytes on every stream.
func preamble(ids []int) []byte {
	var b []byte
	for _, id := range ids {
		b = append(b, frameGob(typeDefs[id].wire())...)
	}
	return b
}

// Snappy framing format (https://github.com/google/snappy/blob/main/framing_format.txt).
const (
	snappyStreamIdentifier = "\xff\x06\x00\x00sNaPpY"
	snappyMaxBlock         = 65536
)

// snappyChunks compresses data as github.com/golang/snappy's Writer does, without the stream
// identifier: one chunk per 64 KiB block, compressed (type 0x00) unless that saves less than
// an eighth (then stored, type 0x01); each with a 3-byte little-endian length and the masked
// CRC-32C of the uncompressed bytes. Chunks can be spliced into any snappy stream.
func snappyChunks(data []byte) []byte {
	var out []byte
	for len(data) > 0 {
		block := data
		if len(block) > snappyMaxBlock {
			block = block[:snappyMaxBlock]
		}
		data = data[len(block):]
		compressed := snappy.Encode(nil, block)
		kind, body := byte(0x00), compressed
		if len(compressed) >= len(block)-len(block)/8 {
			kind, body = 0x01, block
		}
		n := 4 + len(body)
		out = append(out, kind, byte(n), byte(n>>8), byte(n>>16))
		out = binary.LittleEndian.AppendUint32(out, snappyCRC(block))
		out = append(out, body...)
	}
	return out
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func snappyCRC(b []byte) uint32 {
	c := crc32.Checksum(b, castagnoli)
	return (c>>15 | c<<17) + 0xa282ead8
}

// streamKind says how one region of a byte stream is to be read.
type streamKind int

const (
	regionGob    streamKind = iota // plain gob messages
	regionSnappy                   // a snappy framed stream carrying gob messages
	regionRaw                      // bytes outside the protocol (a script's rawHex)
)

// region is a stretch of a recorded stream, from Start to the next region's Start.
type region struct {
	Start int
	Kind  streamKind
	Why   string
}

// annotate describes every byte of a stream: the regions, snappy chunks, and each gob message
// as a type definition or a value. A new region is a new gob stream (type ids start afresh).
func annotate(data []byte, regions []region) string {
	var out strings.Builder
	for i, r := range regions {
		end := len(data)
		if i+1 < len(regions) {
			end = regions[i+1].Start
		}
		if r.Start > end || end > len(data) {
			fmt.Fprintf(&out, "!! region %d out of range\n", i)
			break
		}
		part := data[r.Start:end]
		switch r.Kind {
		case regionGob:
			fmt.Fprintf(&out, "== %#06x..%#06x gob messages, no compression (%s)\n", r.Start, end, r.Why)
			a := newGobAnnotator(&out, "")
			a.feed(r.Start, part)
			a.finish()
		case regionSnappy:
			fmt.Fprintf(&out, "== %#06x..%#06x a snappy framed stream carrying a new gob stream (%s)\n", r.Start, end, r.Why)
			annotateSnappy(&out, r.Start, part)
		case regionRaw:
			fmt.Fprintf(&out, "== %#06x..%#06x raw bytes (%s)\n", r.Start, end, r.Why)
			hexLines(&out, "   ", part)
		}
	}
	return out.String()
}

func annotateSnappy(out *strings.Builder, base int, data []byte) {
	a := newGobAnnotator(out, "      ")
	decodedOff := 0
	for off := 0; off < len(data); {
		if len(data)-off < 4 {
			fmt.Fprintf(out, "!! %#06x truncated chunk header\n", base+off)
			return
		}
		kind := data[off]
		n := int(data[off+1]) | int(data[off+2])<<8 | int(data[off+3])<<16
		if off+4+n > len(data) {
			fmt.Fprintf(out, "!! %#06x chunk of %d bytes runs past the end\n", base+off, n)
			return
		}
		body := data[off+4 : off+4+n]
		switch kind {
		case 0xff:
			fmt.Fprintf(out, "   %#06x snappy stream identifier chunk (0xff, length 6, \"sNaPpY\")\n", base+off)
			hexLines(out, "      ", data[off:off+4+n])
		case 0x00, 0x01:
			var plain []byte
			what := "stored (0x01)"
			if kind == 0x00 {
				what = "compressed (0x00)"
				var err error
				plain, err = snappy.Decode(nil, body[4:])
				if err != nil {
					fmt.Fprintf(out, "!! %#06x bad compressed chunk: %v\n", base+off, err)
					return
				}
			} else {
				plain = body[4:]
			}
			crc := binary.LittleEndian.Uint32(body[:4])
			ok := "ok"
			if crc != snappyCRC(plain) {
				ok = "MISMATCH"
			}
			fmt.Fprintf(out, "   %#06x snappy chunk %s, length %d, masked CRC-32C %#08x (%s); %d gob bytes at decoded offset %#06x:\n",
				base+off, what, n, crc, ok, len(plain), decodedOff)
			a.feed(decodedOff, plain)
			decodedOff += len(plain)
		default:
			fmt.Fprintf(out, "   %#06x snappy chunk of type %#02x, length %d (skipped by readers if >= 0x80)\n", base+off, kind, n)
		}
		off += 4 + n
	}
	a.finish()
}

// gobAnnotator follows one gob stream message by message.
type gobAnnotator struct {
	out    *strings.Builder
	indent string
	names  map[int64]string
	// pending holds the bytes of a message not yet complete (a message split across snappy
	// chunks); pendingOff is its offset.
	pending    []byte
	pendingOff int
	// inInterface: the last message ended inside an Envelope's interface value, after an
	// inline type definition; the value continues in the next message.
	inInterface bool
}

// newGobAnnotator knows gob's predefined types, and names our types by our id table (so a
// stream of values after a preamble reads well); definitions seen on the stream override it.
func newGobAnnotator(out *strings.Builder, indent string) *gobAnnotator {
	a := &gobAnnotator{out: out, indent: indent, names: map[int64]string{
		gobBool: "bool", gobInt: "int", gobUint: "uint", 4: "float", gobBytes: "[]byte",
		gobString: "string", 7: "complex", gobInterface: "interface"}}
	for id, d := range typeDefs {
		a.names[int64(id)] = d.Name
	}
	return a
}

func (a *gobAnnotator) feed(off int, data []byte) {
	if len(a.pending) == 0 {
		a.pendingOff = off
	}
	a.pending = append(a.pending, data...)
	for {
		n, used, err := readUint(a.pending)
		if err == errShort || (err == nil && used+int(n) > len(a.pending)) {
			return
		}
		if err != nil {
			fmt.Fprintf(a.out, "%s!! %#06x %v\n", a.indent, a.pendingOff, err)
			a.pending = nil
			return
		}
		msg := a.pending[:used+int(n)]
		a.message(a.pendingOff, msg, used)
		a.pending = a.pending[len(msg):]
		a.pendingOff += len(msg)
	}
}

func (a *gobAnnotator) finish() {
	if len(a.pending) > 0 {
		fmt.Fprintf(a.out, "%s!! %#06x %d bytes of an incomplete gob message\n", a.indent, a.pendingOff, len(a.pending))
	}
}

// message describes one length-prefixed gob message (prefix is the length prefix's size).
func (a *gobAnnotator) message(off int, msg []byte, prefix int) {
	body := msg[prefix:]
	p := fmt.Sprintf("%s%#06x  %d-byte message (%d length + %d body): ", a.indent, off, len(msg), prefix, len(body))
	id, n, err := readInt(body)
	if err != nil {
		fmt.Fprintf(a.out, "%s!! %v\n", p, err)
		return
	}
	switch {
	case id < 0:
		fmt.Fprintf(a.out, "%sTYPE DEFINITION %s\n", p, a.define(-id, body[n:]))
	case a.inInterface:
		a.inInterface = false
		fmt.Fprintf(a.out, "%sVALUE (continued): the interface's concrete type id %d (%s), then its value and the Envelope's end\n",
			p, id, a.names[id])
	default:
		desc := fmt.Sprintf("VALUE of type id %d (%s)", id, a.names[id])
		if a.names[id] == "Envelope" {
			desc += a.envelope(body[n:])
		}
		fmt.Fprintf(a.out, "%s%s\n", p, desc)
	}
	hexLines(a.out, a.indent+"    ", msg)
}

// envelope describes an Envelope value: field delta 1, the registered name, then either the
// concrete type id and value, or (first use on this stream) the concrete type's definition.
func (a *gobAnnotator) envelope(b []byte) string {
	if len(b) < 1 || b[0] != 1 {
		return ""
	}
	b = b[1:]
	ln, n, err := readUint(b)
	if err != nil || n+int(ln) > len(b) {
		return ""
	}
	name := string(b[n : n+int(ln)])
	b = b[n+int(ln):]
	if name == "" {
		return ": Message = nil"
	}
	desc := fmt.Sprintf(": Message = interface value named %q", name)
	id, n, err := readInt(b)
	if err != nil {
		return desc
	}
	if id < 0 {
		a.inInterface = true
		return desc + "; the name is followed by an INLINE TYPE DEFINITION " + a.define(-id, b[n:]) +
			" and the value continues in a later message"
	}
	return desc + fmt.Sprintf(", concrete type id %d (%s)", id, a.names[id])
}

// define records and describes the wireType that starts b.
func (a *gobAnnotator) define(id int64, b []byte) string {
	kinds := map[byte]string{1: "array", 2: "slice", 3: "struct", 4: "map", 5: "GobEncoder",
		6: "BinaryMarshaler", 7: "TextMarshaler"}
	if len(b) < 3 {
		return fmt.Sprintf("id %d (unreadable)", id)
	}
	kind := kinds[b[0]]
	ln, n, err := readUint(b[3:])
	name := "?"
	if err == nil && 3+n+int(ln) <= len(b) {
		name = string(b[3+n : 3+n+int(ln)])
	}
	a.names[id] = name
	return fmt.Sprintf("id %d: %s %q", id, kind, name)
}

func hexLines(out *strings.Builder, indent string, b []byte) {
	for len(b) > 0 {
		line := b
		if len(line) > 24 {
			line = line[:24]
		}
		b = b[len(line):]
		fmt.Fprintf(out, "%s% x\n", indent, line)
	}
}
