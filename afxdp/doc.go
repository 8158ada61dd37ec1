// Package afxdp is xam's NIC: AF_XDP sockets (UMEM, fill/completion/RX/TX
// rings with atomic producer and consumer indices, batching, need_wakeup,
// busy polling, zero-copy with a reported fallback to copy mode) behind a
// small batch link interface that the protocol layers use, with an
// in-memory implementation of the same interface for unprivileged tests.
//
// Status: not yet built; the package holds this description only.
package afxdp
