package cluster

import (
	"bytes"
	"strings"
	"testing"
)

func TestEncodeValue(t *testing.T) {
	pieces := encodeValue([]byte("a;b%c\n"))
	if len(pieces) != 1 || pieces[0] != "a%3Bb%25c%0A" {
		t.Errorf("encodeValue = %q", pieces)
	}
	if p := encodeValue(nil); len(p) != 1 || p[0] != "" {
		t.Errorf("encodeValue(nil) = %q", p)
	}
	// 1023 plain bytes fit one piece; 1024 take two.
	if p := encodeValue(bytes.Repeat([]byte("x"), maxWireValue)); len(p) != 1 {
		t.Errorf("%d pieces for %d bytes", len(p), maxWireValue)
	}
	if p := encodeValue(bytes.Repeat([]byte("x"), maxWireValue+1)); len(p) != 2 {
		t.Errorf("%d pieces for %d bytes", len(p), maxWireValue+1)
	}
	// An escape is never split across pieces.
	for _, p := range encodeValue(bytes.Repeat([]byte{0xff, 'a'}, 2000)) {
		if len(p) > maxWireValue || strings.HasSuffix(p, "%") || strings.HasSuffix(p[:len(p)-1], "%") && !strings.HasSuffix(p, "%FF") {
			t.Errorf("piece of %d bytes ends %q", len(p), p[max(0, len(p)-4):])
		}
	}
}

func TestDecodeValueErrors(t *testing.T) {
	for _, s := range []string{"%", "%4", "%zz", "a;b", "a\nb", "%+1"} {
		if b, err := decodeValue(s); err == nil {
			t.Errorf("decodeValue(%q) = %q, want an error", s, b)
		}
	}
}

func TestCheckKey(t *testing.T) {
	for _, k := range []string{"card", "xam.card.0", "a-b_c:d/e", strings.Repeat("k", maxKey)} {
		if err := checkKey(k); err != nil {
			t.Errorf("checkKey(%q): %v", k, err)
		}
	}
	for _, k := range []string{"", "a;b", "a=b", "a b", "ü", strings.Repeat("k", maxKey+1)} {
		if err := checkKey(k); err == nil {
			t.Errorf("checkKey(%q) accepted", k)
		}
	}
	// The longest wire key fits PMI-2's key limit.
	if k := keyOf(9999999, strings.Repeat("k", maxKey), maxPieces); len(k) > 64 {
		t.Errorf("wire key of %d bytes", len(k))
	}
}

// FuzzValueEncoding: every value travels: pieces within PMI-2's limit,
// without ';', and back the same.
func FuzzValueEncoding(f *testing.F) {
	f.Add([]byte("hello; 100% sure\n"))
	f.Add([]byte{0, 0xff, ';', '%'})
	f.Add(bytes.Repeat([]byte{';'}, 1000))
	f.Fuzz(func(t *testing.T, value []byte) {
		var back []byte
		for _, p := range encodeValue(value) {
			if len(p) > maxWireValue || strings.ContainsAny(p, ";\x00") {
				t.Fatalf("piece %q", p)
			}
			b, err := decodeValue(p)
			if err != nil {
				t.Fatal(err)
			}
			back = append(back, b...)
		}
		if !bytes.Equal(back, value) {
			t.Fatalf("%q came back as %q", value, back)
		}
	})
}

// FuzzDecodeValue: any wire value decodes or fails, never a panic.
func FuzzDecodeValue(f *testing.F) {
	f.Add("a%3Bb")
	f.Add("%")
	f.Add("%G0")
	f.Fuzz(func(t *testing.T, s string) {
		decodeValue(s)
	})
}
