// Package syncproto holds our own definitions of the messages of Calico's Typha protocol
// (Calico v3.32), written from the facts in docs/calico-protocol.md: the same Go type names,
// field names and field types, registered with encoding/gob under the names Calico registers
// them under, so that encoding/gob produces and accepts what calico-node and calico-typha put
// on the wire.
//
// The package is named syncproto on purpose: gob writes the names of unnamed slice types
// qualified by the package name ("[]syncproto.SerializedUpdate") into its type definitions, so
// the name keeps our type definitions byte-identical to Calico's.
package syncproto

import (
	"encoding/gob"
	"fmt"
	"io"
	"time"
)

// DefaultPort is the port Typha serves on.
const DefaultPort = 5473

// RegisteredNamePrefix is the prefix of every name the message types are registered under. It
// is the pre-monorepo import path of Calico's package, kept by Calico for compatibility.
const RegisteredNamePrefix = "github.com/projectcalico/typha/pkg/syncproto."

// SyncerType names one of the pipelines a client can subscribe to.
type SyncerType string

// The four syncer types calico-node opens.
const (
	SyncerTypeFelix              SyncerType = "felix"
	SyncerTypeBGP                SyncerType = "bgp"
	SyncerTypeTunnelIPAllocation SyncerType = "tunnel-ip-allocation"
	SyncerTypeNodeStatus         SyncerType = "node-status"
)

// AllSyncerTypes lists the syncer types in the order Typha defines them.
var AllSyncerTypes = []SyncerType{
	SyncerTypeFelix, SyncerTypeBGP, SyncerTypeTunnelIPAllocation, SyncerTypeNodeStatus,
}

// CompressionAlgorithm names a stream compression a client offers and a server picks.
type CompressionAlgorithm string

// CompressionSnappy is the only algorithm Calico v3.32 knows: the snappy framing format.
const CompressionSnappy CompressionAlgorithm = "snappy"

// SyncStatus is Calico's api.SyncStatus: a uint8 on the wire.
type SyncStatus uint8

// The sync states, with Calico's numbering.
const (
	WaitForDatastore SyncStatus = iota
	ResyncInProgress
	InSync
)

// String gives the Go constant's name, which is what our JSON files use.
func (s SyncStatus) String() string {
	switch s {
	case WaitForDatastore:
		return "WaitForDatastore"
	case ResyncInProgress:
		return "ResyncInProgress"
	case InSync:
		return "InSync"
	}
	return fmt.Sprintf("SyncStatus(%d)", uint8(s))
}

// ParseSyncStatus accepts the Go constant names and Calico's String() forms.
func ParseSyncStatus(s string) (SyncStatus, error) {
	switch s {
	case "WaitForDatastore", "wait-for-ready":
		return WaitForDatastore, nil
	case "ResyncInProgress", "resync":
		return ResyncInProgress, nil
	case "InSync", "in-sync":
		return InSync, nil
	}
	return 0, fmt.Errorf("unknown sync status %q (want WaitForDatastore, ResyncInProgress or InSync)", s)
}

// UpdateType is Calico's api.UpdateType: a uint8 on the wire.
type UpdateType uint8

// The update types, with Calico's numbering.
const (
	UpdateTypeKVUnknown UpdateType = iota
	UpdateTypeKVNew
	UpdateTypeKVUpdated
	UpdateTypeKVDeleted
)

// String gives Calico's lower-case names, which our JSON files use.
func (u UpdateType) String() string {
	switch u {
	case UpdateTypeKVUnknown:
		return "unknown"
	case UpdateTypeKVNew:
		return "new"
	case UpdateTypeKVUpdated:
		return "updated"
	case UpdateTypeKVDeleted:
		return "deleted"
	}
	return fmt.Sprintf("UpdateType(%d)", uint8(u))
}

// ParseUpdateType is the inverse of String.
func ParseUpdateType(s string) (UpdateType, error) {
	for u := UpdateTypeKVUnknown; u <= UpdateTypeKVDeleted; u++ {
		if u.String() == s {
			return u, nil
		}
	}
	return 0, fmt.Errorf("unknown update type %q (want unknown, new, updated or deleted)", s)
}

// Envelope wraps every message in both directions: gob encodes the interface field as the
// registered name of the concrete type followed by its value.
type Envelope struct {
	Message any
}

// MsgClientHello is the client's first message.
type MsgClientHello struct {
	Hostname string
	Info     string
	Version  string

	SyncerType SyncerType

	SupportsDecoderRestart         bool
	SupportedCompressionAlgorithms []CompressionAlgorithm

	SupportsModernPolicyKeys bool

	ClientConnID uint64
}

// MsgServerHello is the server's answer to MsgClientHello.
type MsgServerHello struct {
	Version string

	SyncerType SyncerType

	SupportsNodeResourceUpdates bool

	ServerConnID uint64
}

// MsgDecoderRestart tells the peer that the next bytes start a new gob stream, compressed
// with CompressionAlgorithm ("" for none). The peer answers with MsgACK once ready.
type MsgDecoderRestart struct {
	Message              string
	CompressionAlgorithm CompressionAlgorithm
}

// MsgACK acknowledges a MsgDecoderRestart.
type MsgACK struct{}

// MsgSyncStatus carries the server's sync status.
type MsgSyncStatus struct {
	SyncStatus SyncStatus
}

// MsgPing is the server's liveness probe.
type MsgPing struct {
	Timestamp time.Time
}

// MsgPong answers a MsgPing, echoing its timestamp. Calico's client leaves PongTimestamp
// zero, so gob omits it.
type MsgPong struct {
	PingTimestamp time.Time
	PongTimestamp time.Time
}

// MsgKVs is a batch of updates.
type MsgKVs struct {
	KVs []SerializedUpdate
}

// SerializedUpdate is one update: the key in libcalico-go's default path form and the value
// in its default serialization (JSON, or a raw string for a few key kinds). A nil (empty)
// Value is a deletion. Revision is an interface: Calico always puts a string in it.
type SerializedUpdate struct {
	Key               string
	Value             []byte
	Revision          any
	V3ResourceVersion string
	TTL               time.Duration
	UpdateType        UpdateType
}

// Messages lists one value of each message type, in the order their gob type ids are
// assigned in this process (see init).
func Messages() []any {
	return []any{
		MsgClientHello{}, MsgServerHello{}, MsgDecoderRestart{}, MsgACK{},
		MsgSyncStatus{}, MsgPing{}, MsgPong{}, MsgKVs{},
	}
}

// NameOf gives the name a message type is registered under, without the prefix
// ("MsgKVs"), or "" for a value that is not one of ours.
func NameOf(msg any) string {
	switch msg.(type) {
	case MsgClientHello:
		return "MsgClientHello"
	case MsgServerHello:
		return "MsgServerHello"
	case MsgDecoderRestart:
		return "MsgDecoderRestart"
	case MsgACK:
		return "MsgACK"
	case MsgSyncStatus:
		return "MsgSyncStatus"
	case MsgPing:
		return "MsgPing"
	case MsgPong:
		return "MsgPong"
	case MsgKVs:
		return "MsgKVs"
	}
	return ""
}

func init() {
	for _, m := range Messages() {
		gob.RegisterName(RegisteredNamePrefix+NameOf(m), m)
	}
	// encoding/gob numbers types process-wide, in the order the process first builds their
	// type information, and those numbers go on the wire. Encoding one message of each type
	// here, in a fixed order, gives every run of this program (binary or test) the same ids,
	// so the golden files are reproducible. Any Go decoder accepts any numbering; Calico's
	// own processes number differently (docs/calico-protocol.md).
	enc := gob.NewEncoder(io.Discard)
	for _, m := range Messages() {
		if kvs, ok := m.(MsgKVs); ok {
			kvs.KVs = []SerializedUpdate{{Key: "k", Revision: "1"}}
			m = kvs
		}
		if err := enc.Encode(&Envelope{Message: m}); err != nil {
			panic(fmt.Sprintf("syncproto: gob cannot encode %T: %v", m, err))
		}
	}
}
