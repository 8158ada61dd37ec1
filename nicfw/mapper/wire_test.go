package mapper

import (
	"errors"
	"reflect"
	"testing"
)

func sampleTable() Message {
	return Message{Type: TypeTable, Privileged: true, MAC: [6]byte{2, 0, 0, 0, 0, 1}, Queue: 3, Epoch: 7,
		Entries: []Entry{{0, [6]byte{2, 0, 0, 0, 0, 1}, 3}, {1, [6]byte{2, 0, 0, 0, 0, 2}, 0}}}
}

func TestParseRoundTrip(t *testing.T) {
	for _, m := range []Message{
		{Type: TypeProbe, MAC: [6]byte{2, 0, 0, 0, 0, 9}, Queue: 65535, Epoch: 1 << 40},
		sampleTable(),
	} {
		p := m.Append(nil)
		if len(p) != HeaderLen+EntryLen*len(m.Entries) {
			t.Fatalf("%d bytes for %d entries", len(p), len(m.Entries))
		}
		got, err := Parse(p)
		if err != nil || !reflect.DeepEqual(got, m) {
			t.Fatalf("Parse(Append(%+v)) = %+v, %v", m, got, err)
		}
	}
}

func TestParseErrors(t *testing.T) {
	st := sampleTable()
	tab := st.Append(nil)
	edit := func(i int, v byte) []byte { p := append([]byte(nil), tab...); p[i] = v; return p }
	for _, tc := range []struct {
		name string
		p    []byte
		want error
	}{
		{"empty", nil, ErrTruncated},
		{"short header", tab[:HeaderLen-1], ErrTruncated},
		{"short entries", tab[:len(tab)-1], ErrTruncated},
		{"version", edit(0, 2), ErrMalformed},
		{"type", edit(1, 0), ErrMalformed},
		{"group sender", edit(4, 1), ErrMalformed},
		{"trailing", append(append([]byte(nil), tab...), 0), ErrMalformed},
		{"unprivileged table", edit(2, 0), ErrMalformed},
		{"id", edit(HeaderLen+1, 1), ErrMalformed},
		{"order", edit(HeaderLen+EntryLen+7, 1), ErrMalformed},
		{"group entry", edit(HeaderLen+2, 3), ErrMalformed},
		{"empty table", edit(21, 0)[:HeaderLen], ErrMalformed},
		{"probe with entries", edit(1, TypeProbe), ErrMalformed},
	} {
		if _, err := Parse(tc.p); !errors.Is(err, tc.want) {
			t.Errorf("%s: Parse = %v, want %v", tc.name, err, tc.want)
		}
	}
}

// FuzzParse checks that Parse never panics and that whatever it accepts
// encodes back to the same bytes but for the ignored bits.
func FuzzParse(f *testing.F) {
	st := sampleTable()
	f.Add(st.Append(nil))
	f.Add((&Message{Type: TypeProbe, MAC: [6]byte{2, 0, 0, 0, 0, 9}}).Append(nil))
	f.Fuzz(func(t *testing.T, p []byte) {
		m, err := Parse(p)
		if err != nil {
			if !errors.Is(err, ErrTruncated) && !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v wraps neither sentinel", err)
			}
			return
		}
		q := m.Append(nil)
		if len(q) != len(p) {
			t.Fatalf("re-encoded %d bytes as %d", len(p), len(q))
		}
		for i := range q {
			ignored := i == 3 || i == 22 || i == 23
			if i == 2 && (p[i]^q[i])&flagPriv == 0 {
				ignored = true
			}
			if q[i] != p[i] && !ignored {
				t.Fatalf("byte %d: %#x re-encoded as %#x", i, p[i], q[i])
			}
		}
		if m2, err := Parse(q); err != nil || !reflect.DeepEqual(m, m2) {
			t.Fatalf("re-parse: %+v, %v; want %+v", m2, err, m)
		}
	})
}
