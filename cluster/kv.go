package cluster

import (
	"fmt"
	"strconv"
	"strings"
)

// How a Put travels: the launcher's key-value space is one for the whole
// job (Slurm's kvs-get ignores who put a key), so a wire key names its
// owner, "x/RANK/KEY". The value is percent-encoded: every byte outside
// printable ASCII, and '%' and ';' (Slurm's PMI-2 server cuts a value at its
// first ';', never reading PMI-2's ";;" escape), becomes %XX. An encoded
// value that fits maxWireValue bytes with its tag travels as "v" + value;
// a longer one as pieces "x/RANK/KEY#0", "#1"... of at most maxWireValue
// bytes each, and "n" + the piece count under the key itself.
const (
	maxKey       = 40      // bytes of a Put key
	maxValue     = 1 << 20 // bytes of a Put value
	maxWireValue = 1023    // PMI-2's 1024-byte value limit, less the tag
	maxPieces    = 3 * maxValue / maxWireValue
)

// checkKey reports whether key is a valid Put key.
func checkKey(key string) error {
	if key == "" || len(key) > maxKey {
		return fmt.Errorf("cluster: key %q: want 1 to %d bytes", key, maxKey)
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte(".-_:/", c) >= 0) {
			return fmt.Errorf("cluster: key %q: byte %q is not a letter, digit or one of .-_:/", key, c)
		}
	}
	return nil
}

// keyOf returns the wire key of rank's key, or of its piece i (i >= 0).
func keyOf(rank int, key string, i int) string {
	k := "x/" + strconv.Itoa(rank) + "/" + key
	if i >= 0 {
		k += "#" + strconv.Itoa(i)
	}
	return k
}

// plain reports whether byte c travels as itself.
func plain(c byte) bool { return c >= 0x20 && c < 0x7f && c != '%' && c != ';' }

// encodeValue percent-encodes value into pieces of at most maxWireValue
// bytes, never splitting an escape; one piece (maybe empty) when it fits.
func encodeValue(value []byte) []string {
	const hex = "0123456789ABCDEF"
	var pieces []string
	var b strings.Builder
	for _, c := range value {
		n := 1
		if !plain(c) {
			n = 3
		}
		if b.Len()+n > maxWireValue {
			pieces = append(pieces, b.String())
			b.Reset()
		}
		if n == 1 {
			b.WriteByte(c)
		} else {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
		}
	}
	return append(pieces, b.String())
}

// decodeValue reverses encodeValue for one piece.
func decodeValue(s string) ([]byte, error) {
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '%' {
			if !plain(c) {
				return nil, fmt.Errorf("cluster: encoded value holds byte %q", c)
			}
			out = append(out, c)
			continue
		}
		if i+2 >= len(s) {
			return nil, fmt.Errorf("cluster: encoded value ends inside an escape")
		}
		v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
		if err != nil {
			return nil, fmt.Errorf("cluster: encoded value: bad escape %q", s[i:i+3])
		}
		out = append(out, byte(v))
		i += 2
	}
	return out, nil
}
