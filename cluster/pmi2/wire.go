package pmi2

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Limits of the protocol (MPICH's pmi2.h, Slurm's pmi.h).
const (
	MaxKeyLen = 64   // bytes of a key (PMI2_MAX_KEYLEN)
	MaxValLen = 1024 // bytes of a value before escaping (PMI2_MAX_VALLEN)

	lenField   = 6      // the length field of a message: "%-6d"
	maxMessage = 999999 // the largest length six digits can say
	maxLine    = 1024   // the longest PMI-1 line read (the init answer)
)

// ErrMalformed is wrapped by every error about a message that breaks the
// protocol's syntax.
var ErrMalformed = errors.New("malformed PMI-2 message")

// Pair is one key=value of a message.
type Pair struct {
	Key, Value string
}

// Message is one PMI-2 command or answer: its command name (the value of
// the leading cmd= pair) and the pairs after it, in order (a key may
// repeat, as in spawn).
type Message struct {
	Cmd   string
	Pairs []Pair
}

// Get returns the value of the first pair named key.
func (m Message) Get(key string) (string, bool) {
	for _, p := range m.Pairs {
		if p.Key == key {
			return p.Value, true
		}
	}
	return "", false
}

// String returns the message's body, for logs and errors.
func (m Message) String() string {
	b, err := m.body()
	if err != nil {
		return fmt.Sprintf("cmd=%s;(%v)", m.Cmd, err)
	}
	return string(b)
}

// checkKey reports whether key can be sent.
func checkKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty key", ErrMalformed)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: key %.20q... is %d bytes, more than %d", ErrMalformed, key, len(key), MaxKeyLen)
	case strings.ContainsAny(key, "=;\x00"):
		return fmt.Errorf("%w: key %q holds '=', ';' or NUL", ErrMalformed, key)
	}
	return nil
}

// body returns the message's pairs as sent, without the length field.
func (m Message) body() ([]byte, error) {
	if err := checkKey(m.Cmd); err != nil {
		return nil, fmt.Errorf("command name: %w", err)
	}
	b := append([]byte("cmd="), m.Cmd...)
	b = append(b, ';')
	for _, p := range m.Pairs {
		if err := checkKey(p.Key); err != nil {
			return nil, err
		}
		if p.Key == "cmd" {
			return nil, fmt.Errorf("%w: a second cmd pair", ErrMalformed)
		}
		if len(p.Value) > MaxValLen {
			return nil, fmt.Errorf("%w: value of %q is %d bytes, more than %d", ErrMalformed, p.Key, len(p.Value), MaxValLen)
		}
		if strings.IndexByte(p.Value, 0) >= 0 {
			return nil, fmt.Errorf("%w: value of %q holds NUL", ErrMalformed, p.Key)
		}
		b = append(b, p.Key...)
		b = append(b, '=')
		b = append(b, strings.ReplaceAll(p.Value, ";", ";;")...)
		b = append(b, ';')
	}
	return b, nil
}

// Encode returns the message as sent: the 6-byte length field ("%-6d")
// and the body.
func Encode(m Message) ([]byte, error) {
	body, err := m.body()
	if err != nil {
		return nil, err
	}
	if len(body) > maxMessage {
		return nil, fmt.Errorf("%w: %d bytes, more than %d", ErrMalformed, len(body), maxMessage)
	}
	return append(fmt.Appendf(nil, "%-6d", len(body)), body...), nil
}

// Parse reads a message body: `cmd=NAME;` then `key=value;` pairs, ';;'
// in a value standing for ';'.
func Parse(body []byte) (Message, error) {
	var m Message
	rest := string(body)
	first := true
	for rest != "" {
		key, after, ok := strings.Cut(rest, "=")
		if !ok {
			return Message{}, fmt.Errorf("%w: %q has no '='", ErrMalformed, clip(rest))
		}
		if strings.ContainsAny(key, ";\x00") || key == "" {
			return Message{}, fmt.Errorf("%w: bad key %q", ErrMalformed, clip(key))
		}
		value, n, err := readValue(after)
		if err != nil {
			return Message{}, fmt.Errorf("%w: value of %q: %w", ErrMalformed, clip(key), err)
		}
		rest = after[n:]
		if first {
			if key != "cmd" || value == "" {
				return Message{}, fmt.Errorf("%w: does not begin with cmd=NAME; (%q)", ErrMalformed, clip(string(body)))
			}
			m.Cmd, first = value, false
			continue
		}
		m.Pairs = append(m.Pairs, Pair{key, value})
	}
	if first {
		return Message{}, fmt.Errorf("%w: empty", ErrMalformed)
	}
	return m, nil
}

// readValue reads an escaped value up to its terminating ';' and returns it
// unescaped, with the number of bytes consumed (the ';' included).
func readValue(s string) (string, int, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == 0 {
			return "", 0, errors.New("holds NUL")
		}
		if c != ';' {
			b.WriteByte(c)
			continue
		}
		if i+1 < len(s) && s[i+1] == ';' {
			b.WriteByte(';')
			i++
			continue
		}
		return b.String(), i + 1, nil
	}
	return "", 0, errors.New("not terminated by ';'")
}

// ReadMessage reads one message: its length field, then its body.
func ReadMessage(r io.Reader) (Message, error) {
	var field [lenField]byte
	if _, err := io.ReadFull(r, field[:]); err != nil {
		return Message{}, fmt.Errorf("reading a PMI-2 message: %w", eof(err))
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(field[:])))
	if err != nil || n <= 0 {
		return Message{}, fmt.Errorf("%w: length field %q", ErrMalformed, field[:])
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return Message{}, fmt.Errorf("reading a PMI-2 message of %d bytes: %w", n, eof(err))
	}
	return Parse(body)
}

// eof turns a clean end of stream into io.ErrUnexpectedEOF: the peer closed
// the connection where an answer was due.
func eof(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// initLine is PMI-1's version handshake that opens the connection.
const initLine = "cmd=init pmi_version=2 pmi_subversion=0\n"

// parseInitAnswer reads the answer to initLine: `cmd=response_to_init rc=0
// pmi_version=2 pmi_subversion=0`, space-separated, newline-terminated.
func parseInitAnswer(line string) error {
	line, ok := strings.CutSuffix(line, "\n")
	if !ok {
		return fmt.Errorf("%w: init answer %q not terminated by a newline", ErrMalformed, clip(line))
	}
	kv := map[string]string{}
	for _, f := range strings.Fields(line) {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			return fmt.Errorf("%w: init answer %q: %q has no '='", ErrMalformed, clip(line), clip(f))
		}
		kv[k] = v
	}
	if kv["cmd"] != "response_to_init" {
		return fmt.Errorf("%w: expected cmd=response_to_init, got %q", ErrMalformed, clip(line))
	}
	if kv["rc"] != "0" {
		return fmt.Errorf("the PMI server refused PMI-2 (%q): it speaks version %s.%s",
			clip(line), kv["pmi_version"], kv["pmi_subversion"])
	}
	if kv["pmi_version"] != "2" || kv["pmi_subversion"] != "0" {
		return fmt.Errorf("the PMI server answered version %s.%s, not 2.0", kv["pmi_version"], kv["pmi_subversion"])
	}
	return nil
}

// readLine reads up to and including '\n', at most maxLine bytes.
func readLine(r *bufio.Reader) (string, error) {
	var b []byte
	for len(b) < maxLine {
		c, err := r.ReadByte()
		if err != nil {
			return "", fmt.Errorf("reading the PMI init answer: %w", eof(err))
		}
		b = append(b, c)
		if c == '\n' {
			return string(b), nil
		}
	}
	return "", fmt.Errorf("%w: init answer longer than %d bytes", ErrMalformed, maxLine)
}

// clip shortens s for an error message.
func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
