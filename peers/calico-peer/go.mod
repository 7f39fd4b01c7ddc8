// Our reference peer for Calico's Typha protocol (see ../README.md and docs/calico-protocol.md).
module typha-rs/peers/calico-peer

go 1.26.0

require github.com/golang/snappy v1.0.0
