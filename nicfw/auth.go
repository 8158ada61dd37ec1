package nicfw

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"fmt"

	"github.com/xam-project/xam/nicfw/transport"
)

// Message authentication. A virtual network may carry a key
// (VNet.Key, 16 or 32 bytes: AES-128 or AES-256). The messages its
// endpoints send to other hosts then travel in an envelope that a host
// without the key cannot make: the message, the sender's transport epoch
// and a counter, with an AES-GMAC tag over all of it, the hosts bound in
// through the nonce. Big-endian:
//
//	 0          1             5             13          n-16   n
//	+----------+-------------+-------------+-----------+------+
//	| 3 (auth) | epoch (src) | counter     | message   | tag  |
//	+----------+-------------+-------------+-----------+------+
//
// nonce = source host (2) | destination host (2) | counter (8); the
// counter starts at a random value when the engine starts and grows by one
// per envelope, so a nonce is never used twice under one key. The
// receiving engine opens the envelope with the key of the endpoint the
// message names (for a return: of the endpoint it returns to) and
// delivers it only if the tag is right, the epoch is the sender's current
// one (the transport's), and the counter has not been seen from that
// sender's incarnation (a window of authWindow counters behind the
// highest): a message an on-path host forged, altered or replayed is
// dropped and counted (EngineStats.AuthFailed, AuthReplayed), never
// returned. An endpoint with a key takes only enveloped messages and
// returns; one without takes both, checking tags as ever. A return the
// receiving engine makes for a message to an endpoint with the key is
// enveloped with it; a return it cannot envelope (no such endpoint, say)
// does not reach a keyed sender, whose message then times out instead.
// Envelopes are not encrypted: the key authenticates, it does not hide.

const (
	msgAuth       = 3         // the first byte of an envelope
	authHeaderLen = 1 + 4 + 8 // kind, epoch, counter
	authTagLen    = 16        // the GMAC tag
	authOverhead  = authHeaderLen + authTagLen
	authWindow    = 1024            // counters remembered behind the highest, per sender
	authWords     = authWindow / 64 // the window's bitmap
)

// newAEAD returns the GMAC of key, or an error for a key that is not 16
// or 32 bytes.
func newAEAD(key []byte) (cipher.AEAD, error) {
	if len(key) != 16 && len(key) != 32 {
		return nil, fmt.Errorf("%w: a key of %d bytes, want 16 or 32", ErrConfig, len(key))
	}
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	return cipher.NewGCM(b)
}

// NewKey returns a fresh random 32-byte key for VNet.Key.
func NewKey() ([]byte, error) {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		return nil, err
	}
	return k, nil
}

// authState is the engine's side of authentication: the next counter,
// the buffers envelopes are built and checked in, and per sending host
// the counters seen.
type authState struct {
	next  uint64
	buf   []byte // an envelope being sent
	nonce [12]byte
	seen  map[HostID]*replayWindow
}

// replayWindow is the counters seen from one sending host's incarnation:
// the highest, and a bitmap of the authWindow counters up to it.
type replayWindow struct {
	epoch uint32
	top   uint64
	bits  [authWords]uint64
}

// initAuth sets up authentication's state (at NewEngine).
func (e *Engine) initAuth() error {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return err
	}
	e.auth.next = binary.BigEndian.Uint64(b[:])
	e.auth.buf = make([]byte, e.maxPL+authOverhead)
	e.auth.seen = map[HostID]*replayWindow{}
	return nil
}

// setNonce writes the nonce of an envelope from src to dst with counter
// ctr.
func (a *authState) setNonce(src, dst HostID, ctr uint64) []byte {
	binary.BigEndian.PutUint16(a.nonce[0:], uint16(src))
	binary.BigEndian.PutUint16(a.nonce[2:], uint16(dst))
	binary.BigEndian.PutUint64(a.nonce[4:], ctr)
	return a.nonce[:]
}

// seal returns m, a message for host dst, in an envelope made with aead
// (in e.auth.buf, valid until the next seal). The envelope names the epoch
// this host has toward dst (transport.Peer.SrcEpoch: its own, or a new
// incarnation's toward dst), which dst holds for it.
func (e *Engine) seal(aead cipher.AEAD, dst HostID, m []byte) []byte {
	b := e.auth.buf[:authHeaderLen+len(m)]
	b[0] = msgAuth
	epoch := e.tr.Config().Epoch
	if p := e.tr.Peer(dst); p != nil {
		epoch = p.SrcEpoch()
	}
	binary.BigEndian.PutUint32(b[1:], epoch)
	ctr := e.auth.next
	e.auth.next++
	binary.BigEndian.PutUint64(b[5:], ctr)
	copy(b[authHeaderLen:], m)
	tag := aead.Seal(b[len(b):len(b)], e.auth.setNonce(e.cfg.Host, dst, ctr), nil, b) // right after b, not over it
	return b[:len(b)+len(tag)]
}

// envelope splits p, an envelope, into its message; ok false for one too
// short to be one.
func envelope(p []byte) (m []byte, ok bool) {
	if len(p) < authOverhead || p[0] != msgAuth {
		return nil, false
	}
	return p[authHeaderLen : len(p)-authTagLen], true
}

// open checks envelope p from host src with aead: its tag, its epoch
// against the sender's current one (peer), and its counter against those
// seen (not noted: noteOpened does, once the message is taken).
func (e *Engine) open(aead cipher.AEAD, src HostID, peer *transport.Peer, p []byte) (ctr uint64, ok bool) {
	ctr = binary.BigEndian.Uint64(p[5:])
	n := len(p) - authTagLen
	if _, err := aead.Open(nil, e.auth.setNonce(src, e.cfg.Host, ctr), p[n:], p[:n]); err != nil {
		e.stats.AuthFailed++
		return 0, false
	}
	if peer == nil || binary.BigEndian.Uint32(p[1:]) != peer.Epoch() {
		e.stats.AuthFailed++ // made for another incarnation of the sender
		return 0, false
	}
	if w := e.auth.seen[src]; w != nil && w.epoch == peer.Epoch() && w.has(ctr) {
		e.stats.AuthReplayed++
		return 0, false
	}
	return ctr, true
}

// noteOpened records counter ctr of src's current incarnation as seen.
func (e *Engine) noteOpened(src HostID, peer *transport.Peer, ctr uint64) {
	w := e.auth.seen[src]
	if w == nil {
		w = new(replayWindow)
		e.auth.seen[src] = w
	}
	if w.epoch != peer.Epoch() {
		*w = replayWindow{epoch: peer.Epoch(), top: ctr}
	}
	w.add(ctr)
}

// has reports whether ctr was seen, or lies too far behind the highest to
// tell (then it counts as seen).
func (w *replayWindow) has(ctr uint64) bool {
	switch {
	case ctr > w.top:
		return false
	case w.top-ctr >= authWindow:
		return true
	}
	return w.bits[ctr/64%authWords]&(1<<(ctr%64)) != 0
}

// add records ctr, moving the window up if it is the highest.
func (w *replayWindow) add(ctr uint64) {
	if ctr > w.top {
		if ctr-w.top >= authWindow {
			w.bits = [authWords]uint64{}
		} else {
			for c := w.top + 1; c <= ctr; c++ { // the slots of counters now too old
				w.bits[c/64%authWords] &^= 1 << (c % 64)
			}
		}
		w.top = ctr
	}
	w.bits[ctr/64%authWords] |= 1 << (ctr % 64)
}
