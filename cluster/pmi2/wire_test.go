package pmi2

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestEncode(t *testing.T) {
	b, err := Encode(Message{Cmd: "kvs-put", Pairs: []Pair{{"key", "k"}, {"value", "a;b;"}}})
	if err != nil {
		t.Fatal(err)
	}
	// "%-6d": digits, then spaces; ';' in a value doubled.
	if want := "31    cmd=kvs-put;key=k;value=a;;b;;;"; string(b) != want {
		t.Errorf("Encode = %q, want %q", b, want)
	}
	m, err := ReadMessage(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := m.Get("value"); m.Cmd != "kvs-put" || v != "a;b;" {
		t.Errorf("read back %+v", m)
	}
}

func TestEncodeErrors(t *testing.T) {
	long := strings.Repeat("x", MaxValLen+1)
	for _, m := range []Message{
		{Cmd: ""},
		{Cmd: "a=b"},
		{Cmd: "kvs-put", Pairs: []Pair{{"", "v"}}},
		{Cmd: "kvs-put", Pairs: []Pair{{"k;", "v"}}},
		{Cmd: "kvs-put", Pairs: []Pair{{"k=", "v"}}},
		{Cmd: "kvs-put", Pairs: []Pair{{strings.Repeat("k", MaxKeyLen+1), "v"}}},
		{Cmd: "kvs-put", Pairs: []Pair{{"k", long}}},
		{Cmd: "kvs-put", Pairs: []Pair{{"k", "a\x00b"}}},
		{Cmd: "kvs-put", Pairs: []Pair{{"cmd", "again"}}},
	} {
		if _, err := Encode(m); !errors.Is(err, ErrMalformed) {
			t.Errorf("Encode(%+v) = %v, want ErrMalformed", m, err)
		}
	}
}

// TestParseSlurm reads answers as slurmstepd writes them.
func TestParseSlurm(t *testing.T) {
	m, err := Parse([]byte("cmd=fullinit-response;rc=0;pmi-version=2;pmi-subversion=0;rank=2;size=4;appnum=-1;debugged=FALSE;pmiverbose=FALSE;"))
	if err != nil {
		t.Fatal(err)
	}
	if m.Cmd != "fullinit-response" || len(m.Pairs) != 8 {
		t.Errorf("%+v", m)
	}
	if v, ok := m.Get("rank"); !ok || v != "2" {
		t.Errorf("rank %q %v", v, ok)
	}
	if _, ok := m.Get("spawner-jobid"); ok {
		t.Error("found a pair that is not there")
	}
	m, err = Parse([]byte("cmd=kvs-get-response;rc=0;found=TRUE;value=;"))
	if v, ok := m.Get("value"); err != nil || !ok || v != "" {
		t.Errorf("empty value: %q %v %v", v, ok, err)
	}
	m, err = Parse([]byte("cmd=spawn;argv=a;argv=b;"))
	if err != nil || len(m.Pairs) != 2 || m.Pairs[1].Value != "b" {
		t.Errorf("repeated keys: %+v %v", m, err)
	}
}

func TestParseErrors(t *testing.T) {
	for _, s := range []string{
		"",
		"cmd=",              // no terminator
		"cmd=;",             // empty command
		"key=v;",            // not cmd first
		"cmd=x;novalue",     // no '='
		"cmd=x;k=v",         // value not terminated
		"cmd=x;k=v;;",       // escaped ';' then nothing
		"cmd=x;=v;",         // empty key
		"cmd=x;k=a\x00b;",   // NUL
		"cmd=x;k;j=v;",      // ';' in a key
		"cmd=x;k=v;garbage", // trailing text
	} {
		if m, err := Parse([]byte(s)); !errors.Is(err, ErrMalformed) {
			t.Errorf("Parse(%q) = %+v, %v; want ErrMalformed", s, m, err)
		}
	}
}

func TestReadMessageErrors(t *testing.T) {
	for _, s := range []string{
		"",                // nothing
		"12",              // short length field
		"abc   cmd=x;",    // not a number
		"0     ",          // zero length
		"-5    cmd=x;",    // negative
		"20    cmd=x;",    // body shorter than said
		"9     cmd=x;k=v", // body cut inside
		"  7   cmd=x;k=v", // a number with spaces on both sides reads, then the body is bad
	} {
		if m, err := ReadMessage(strings.NewReader(s)); err == nil {
			t.Errorf("ReadMessage(%q) = %+v, want an error", s, m)
		}
	}
	// MPICH writes the length with leading spaces too: both read.
	for _, s := range []string{"6     cmd=x;", "     6cmd=x;"} {
		if m, err := ReadMessage(strings.NewReader(s)); err != nil || m.Cmd != "x" {
			t.Errorf("ReadMessage(%q) = %+v, %v", s, m, err)
		}
	}
}

func TestInitAnswer(t *testing.T) {
	if err := parseInitAnswer("cmd=response_to_init rc=0 pmi_version=2 pmi_subversion=0\n"); err != nil {
		t.Error(err)
	}
	for _, s := range []string{
		"cmd=response_to_init rc=0 pmi_version=2 pmi_subversion=0", // no newline
		"cmd=response_to_init rc=1 pmi_version=1 pmi_subversion=1\n",
		"cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=1\n",
		"cmd=other rc=0\n",
		"cmd=response_to_init junk\n",
		"\n",
	} {
		if err := parseInitAnswer(s); err == nil {
			t.Errorf("parseInitAnswer(%q) accepted", s)
		}
	}
}

// FuzzParse: any body parses or fails cleanly; what parses encodes back to
// a message that parses the same.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"cmd=fullinit-response;rc=0;pmi-version=2;pmi-subversion=0;rank=2;size=4;appnum=-1;debugged=FALSE;pmiverbose=FALSE;",
		"cmd=kvs-get-response;rc=0;found=TRUE;value=a;;b;;;",
		"cmd=kvs-fence-response;rc=0;",
		"cmd=x;k=;", "cmd=x;k=v;;", "cmd=;", "cmd=x;=;", ";;;;", "cmd=a;b=c;d",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		m, err := Parse(body)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error not ErrMalformed: %v", err)
			}
			return
		}
		b, err := Encode(m)
		if err != nil {
			// Parse takes what Encode refuses: long keys and values, "cmd" again.
			return
		}
		m2, err := ReadMessage(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%q parsed as %+v, encoded as %q, which does not read back: %v", body, m, b, err)
		}
		if m2.Cmd != m.Cmd || !slices.Equal(m2.Pairs, m.Pairs) {
			t.Fatalf("%q: %+v read back as %+v", body, m, m2)
		}
	})
}

// FuzzRoundTrip: any key and value Encode accepts read back the same.
func FuzzRoundTrip(f *testing.F) {
	f.Add("key", "value")
	f.Add("k", ";")
	f.Add("k", ";;;")
	f.Add("k", "")
	f.Add("k=", "v")
	f.Add("k", "a=b;c\n")
	f.Fuzz(func(t *testing.T, key, value string) {
		b, err := Encode(Message{Cmd: "kvs-put", Pairs: []Pair{{key, value}, {"next", "x"}}})
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error not ErrMalformed: %v", err)
			}
			return
		}
		m, err := ReadMessage(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%q=%q encoded as %q: %v", key, value, b, err)
		}
		if len(m.Pairs) != 2 || m.Pairs[0] != (Pair{key, value}) || m.Pairs[1] != (Pair{"next", "x"}) {
			t.Fatalf("%q=%q read back as %+v", key, value, m)
		}
	})
}

// FuzzInitAnswer: any line is accepted or refused, never a panic.
func FuzzInitAnswer(f *testing.F) {
	f.Add("cmd=response_to_init rc=0 pmi_version=2 pmi_subversion=0\n")
	f.Add("cmd=response_to_init rc=1\n")
	f.Add("=\n")
	f.Fuzz(func(t *testing.T, line string) {
		parseInitAnswer(line)
	})
}
