package transport

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"fmt"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/cells"
)

// Frame authentication. With Config.Key every frame the transport hands
// to the link (DATA, compact cells, ACK, NACK and RESET frames, packed
// frames, retransmissions) ends in a trailer: one more cell, counted in
// the frame header's cell count, so that the frame stays what every xam
// receiver and XDP program checks (18 + 53n bytes), on the transport's
// circuit VPI/VCI (admitted wherever its PDUs are) with PTI 101 (an OAM
// cell, which reassemblers drop):
//
//	 0            5            29              37               53
//	+------------+------------+---------------+----------------+
//	| ATM header | zero (24)  | counter (8)   | tag (16)       |
//	+------------+------------+---------------+----------------+
//
// The counter starts at a random number when the transport starts and
// grows by one for every frame sealed, so no two frames of a transport
// share one. The tag is AES-GMAC (GCM with no plaintext) under the key,
// with nonce the last four bytes of the sender's MAC address and the
// counter (12 bytes, GCM's own nonce size, whose counter block needs no
// hashing: about 20 ns less a frame than 14 bytes), over every byte of the
// frame before it, from the Ethernet header to the counter. The nonce
// names the sender by its address rather than its host id: a host's own
// id is not in its host table, its address is in every frame. Two
// senders share a nonce only if their addresses end alike and their
// counters meet: the random start keeps a restarted transport, or a host
// whose address ends as another's, from using the same counters again
// (two that send n frames each share a counter with odds of about
// 2n/2^64).
//
// seal writes the trailer of each frame just before the link takes it
// (output, flushOut): a retransmission is sealed again with a fresh
// counter, and the cells a channel keeps to retransmit are not touched.
// The receiver checks the trailer first (receive), before the frame's
// cells are unpacked, and drops a frame without a valid one
// (Stats.AuthFailed); a transport without a key drops a frame that ends
// in a trailer cell (a keyed host's), counting it there too. Replays need
// no window of their own: see the package documentation.
const (
	counterLen  = 8
	tagLen      = 16
	trailerLen  = cells.CellSize
	trailerPTI  = 0b101
	nonceLen    = macTail + counterLen
	macTail     = 4 // the bytes of the sender's MAC address in the nonce
	frameHeader = afxdp.EthernetHeaderLen + cells.FrameHeaderSize
)

// newFrameAEAD returns the AES-GMAC of frame trailers under key.
func newFrameAEAD(key []byte) (cipher.AEAD, error) {
	if len(key) != 16 && len(key) != 32 {
		return nil, fmt.Errorf("%w: transport key of %d bytes, want 16 or 32", ErrConfig, len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("%w: transport key: %w", ErrConfig, err)
	}
	aead, err := cipher.NewGCM(block) // nonceLen, the standard size
	if err != nil {
		return nil, fmt.Errorf("%w: transport key: %w", ErrConfig, err)
	}
	return aead, nil
}

// seal writes the trailer of each frame, whose last trailerLen bytes are
// its room for one, with a fresh counter. Without a key it does nothing.
func (t *Transport) seal(frames [][]byte) {
	if t.aead == nil {
		return
	}
	for _, f := range frames {
		tr := f[len(f)-trailerLen:]
		copy(tr, t.trailerHdr[:])
		clear(tr[cells.HeaderSize : trailerLen-tagLen-counterLen])
		binary.BigEndian.PutUint16(f[afxdp.EthernetHeaderLen+2:], uint16((len(f)-frameHeader)/cells.CellSize))
		n := len(f) - tagLen
		t.sealed++
		binary.BigEndian.PutUint64(f[n-counterLen:n], t.sealed)
		binary.BigEndian.PutUint64(t.nonce[macTail:], t.sealed)
		t.aead.Seal(f[n:n], t.nonce[:], nil, f[:n])
	}
}

// open reports whether frame f ends in a valid trailer under the key.
func (t *Transport) open(f []byte) bool {
	if len(f) < frameHeader+2*cells.CellSize {
		return false
	}
	n := len(f) - tagLen
	copy(t.rnonce[:macTail], f[12-macTail:12])
	copy(t.rnonce[macTail:], f[n-counterLen:n])
	_, err := t.aead.Open(nil, t.rnonce[:], f[n:], f[:n])
	return err == nil
}

// renewWrapped renews p's destination epoch when a send channel's
// sequence numbers come round again (after 2^16 messages): an
// acknowledgement recorded before names the old one (see the package
// documentation, "Authentication").
func (t *Transport) renewWrapped(p *Peer) {
	var h header
	t.renew(p, &h)
}
