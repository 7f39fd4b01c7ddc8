package main

// The serve subcommand's script: a JSON list of steps, played in order on every connection
// after the client's hello has been read. Each step is an object with exactly one of these
// keys:
//
//	{"expectHello": {"syncerType": "felix", "supportsDecoderRestart": true, ...}}
//	    check fields of the client's hello (only those given); also hostname, version, info,
//	    supportedCompressionAlgorithms, supportsModernPolicyKeys
//	{"serverHello": {"version": "v3.32.0", "syncerType": "bgp", "supportsNodeResourceUpdates": true, "serverConnID": 7}}
//	    send MsgServerHello; every field optional: the client's syncer type echoed (felix if
//	    empty), node resource updates true, the connection's number as id
//	{"decoderRestart": "snappy"}, {"decoderRestart": ""} or {"decoderRestart": {"message": "...", "compression": "snappy"}}
//	    send MsgDecoderRestart, wait for the client's MsgACK, then start a new outgoing gob
//	    stream (snappy-framed for "snappy")
//	{"snapshot": {"kvs": [...], "perMessage": 1000}}
//	    Typha's pre-encoded ("binary") snapshot: a fresh snappy stream and gob encoder holding
//	    MsgKVs of up to perMessage KVs then MsgDecoderRestart (snappy), written as raw bytes;
//	    then wait for the MsgACK and start a new snappy stream. Needs the current stream to be
//	    snappy, as Typha only does this after restarting into snappy.
//	{"syncStatus": "InSync"}            (or WaitForDatastore, ResyncInProgress)
//	{"kvs": [{"key": "/calico/v1/...", "value": {...}, "revision": "123"}, ...]}
//	    one MsgKVs; see kvSpec for the fields
//	{"ping": true} or {"ping": "2026-11-24T12:00:00Z"}   send MsgPing (now, or that time)
//	{"expectPong": true}     the next client message must be a MsgPong echoing the last ping
//	{"sleep": "100ms"}
//	{"rawHex": "0a0b..."}    write these bytes to the socket as they are (hostile input)
//	{"close": true}          close the connection (ends the script)
//	{"expectClose": true}    the client must close the connection (pongs are allowed meanwhile)
//
// When the steps run out without a close, the server keeps reading (pongs only) until the
// client closes.

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"typha-rs/peers/calico-peer/syncproto"
)

type helloExpect struct {
	Hostname                       *string   `json:"hostname"`
	Info                           *string   `json:"info"`
	Version                        *string   `json:"version"`
	SyncerType                     *string   `json:"syncerType"`
	SupportsDecoderRestart         *bool     `json:"supportsDecoderRestart"`
	SupportedCompressionAlgorithms *[]string `json:"supportedCompressionAlgorithms"`
	SupportsModernPolicyKeys       *bool     `json:"supportsModernPolicyKeys"`
}

type serverHelloSpec struct {
	Version                     *string `json:"version"`
	SyncerType                  *string `json:"syncerType"`
	SupportsNodeResourceUpdates *bool   `json:"supportsNodeResourceUpdates"`
	ServerConnID                *uint64 `json:"serverConnID"`
}

type restartSpec struct {
	Message     *string `json:"message"`
	Compression string  `json:"compression"`
}

// UnmarshalJSON takes a bare algorithm name or the object form.
func (r *restartSpec) UnmarshalJSON(b []byte) error {
	var name string
	if err := json.Unmarshal(b, &name); err == nil {
		r.Compression = name
		return nil
	}
	type plain restartSpec
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	return d.Decode((*plain)(r))
}

type snapshotSpec struct {
	KVs        []kvSpec `json:"kvs"`
	PerMessage int      `json:"perMessage"`
}

// kvSpec is one SerializedUpdate of a script.
type kvSpec struct {
	Key string `json:"key"`
	// Value: absent or null is a deletion (no value bytes); a JSON string is sent as its
	// contents, raw (as Calico sends config values); anything else is sent as its JSON text,
	// compacted, key order as written.
	Value json.RawMessage `json:"value"`
	// Revision: a JSON string is sent as a string (as Calico always does); a JSON integer as
	// an int64; absent as a nil interface.
	Revision          json.RawMessage `json:"revision"`
	V3ResourceVersion string          `json:"v3ResourceVersion"`
	TTL               string          `json:"ttl"`
	// UpdateType: new, updated, deleted or unknown; default new, or deleted without a value.
	UpdateType string `json:"updateType"`
}

type step struct {
	ExpectHello    *helloExpect     `json:"expectHello"`
	ServerHello    *serverHelloSpec `json:"serverHello"`
	DecoderRestart *restartSpec     `json:"decoderRestart"`
	Snapshot       *snapshotSpec    `json:"snapshot"`
	SyncStatus     *string          `json:"syncStatus"`
	KVs            *[]kvSpec        `json:"kvs"`
	Ping           json.RawMessage  `json:"ping"`
	ExpectPong     *bool            `json:"expectPong"`
	Sleep          *string          `json:"sleep"`
	RawHex         *string          `json:"rawHex"`
	Close          *bool            `json:"close"`
	ExpectClose    *bool            `json:"expectClose"`

	// Filled in by loadScript.
	kind      string
	updates   []syncproto.SerializedUpdate
	snapshot  []syncproto.SerializedUpdate
	status    syncproto.SyncStatus
	pingAt    time.Time
	sleep     time.Duration
	raw       []byte
	perMsg    int
	lineLabel string
}

func loadScript(path string) ([]step, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseScript(b)
}

func parseScript(b []byte) ([]step, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	var steps []step
	if err := d.Decode(&steps); err != nil {
		return nil, fmt.Errorf("script: %w", err)
	}
	for i := range steps {
		s := &steps[i]
		s.lineLabel = fmt.Sprintf("step %d", i+1)
		if err := s.prepare(); err != nil {
			return nil, fmt.Errorf("script %s: %w", s.lineLabel, err)
		}
	}
	return steps, nil
}

func (s *step) prepare() error {
	n := 0
	set := func(ok bool, kind string) {
		if ok {
			n++
			s.kind = kind
		}
	}
	set(s.ExpectHello != nil, "expectHello")
	set(s.ServerHello != nil, "serverHello")
	set(s.DecoderRestart != nil, "decoderRestart")
	set(s.Snapshot != nil, "snapshot")
	set(s.SyncStatus != nil, "syncStatus")
	set(s.KVs != nil, "kvs")
	set(s.Ping != nil, "ping")
	set(s.ExpectPong != nil, "expectPong")
	set(s.Sleep != nil, "sleep")
	set(s.RawHex != nil, "rawHex")
	set(s.Close != nil, "close")
	set(s.ExpectClose != nil, "expectClose")
	if n != 1 {
		return fmt.Errorf("want exactly one key per step, found %d", n)
	}
	var err error
	switch s.kind {
	case "decoderRestart":
		c := s.DecoderRestart.Compression
		if c != "" && c != string(syncproto.CompressionSnappy) {
			return fmt.Errorf("decoderRestart: unknown compression %q (want snappy or \"\")", c)
		}
	case "snapshot":
		if s.snapshot, err = convertKVs(s.Snapshot.KVs); err != nil {
			return err
		}
		s.perMsg = s.Snapshot.PerMessage
		if s.perMsg <= 0 {
			s.perMsg = 1000 // Typha's chunk size for its pre-encoded snapshot
		}
	case "syncStatus":
		s.status, err = syncproto.ParseSyncStatus(*s.SyncStatus)
	case "kvs":
		s.updates, err = convertKVs(*s.KVs)
	case "ping":
		var flag bool
		var at string
		if json.Unmarshal(s.Ping, &flag) == nil {
			if !flag {
				return fmt.Errorf("ping: want true or a time")
			}
		} else if err = json.Unmarshal(s.Ping, &at); err == nil {
			s.pingAt, err = time.Parse(time.RFC3339Nano, at)
		}
	case "sleep":
		s.sleep, err = time.ParseDuration(*s.Sleep)
	case "rawHex":
		s.raw, err = hex.DecodeString(*s.RawHex)
	}
	return err
}

func convertKVs(specs []kvSpec) ([]syncproto.SerializedUpdate, error) {
	out := make([]syncproto.SerializedUpdate, 0, len(specs))
	for i, k := range specs {
		u, err := k.update()
		if err != nil {
			return nil, fmt.Errorf("kv %d (%q): %w", i+1, k.Key, err)
		}
		out = append(out, u)
	}
	return out, nil
}

func (k kvSpec) update() (syncproto.SerializedUpdate, error) {
	u := syncproto.SerializedUpdate{Key: k.Key, V3ResourceVersion: k.V3ResourceVersion}
	if k.Key == "" {
		return u, fmt.Errorf("no key")
	}
	v := bytes.TrimSpace(k.Value)
	switch {
	case len(v) == 0 || string(v) == "null":
	case v[0] == '"':
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return u, err
		}
		u.Value = []byte(s)
	default:
		var c bytes.Buffer
		if err := json.Compact(&c, v); err != nil {
			return u, err
		}
		u.Value = c.Bytes()
	}
	r := bytes.TrimSpace(k.Revision)
	switch {
	case len(r) == 0 || string(r) == "null":
	case r[0] == '"':
		var s string
		if err := json.Unmarshal(r, &s); err != nil {
			return u, err
		}
		u.Revision = s
	default:
		var n int64
		if err := json.Unmarshal(r, &n); err != nil {
			return u, fmt.Errorf("revision: want a string or an integer: %w", err)
		}
		u.Revision = n
	}
	if k.TTL != "" {
		ttl, err := time.ParseDuration(k.TTL)
		if err != nil {
			return u, err
		}
		u.TTL = ttl
	}
	switch {
	case k.UpdateType != "":
		t, err := syncproto.ParseUpdateType(k.UpdateType)
		if err != nil {
			return u, err
		}
		u.UpdateType = t
	case u.Value == nil:
		u.UpdateType = syncproto.UpdateTypeKVDeleted
	default:
		u.UpdateType = syncproto.UpdateTypeKVNew
	}
	return u, nil
}
