package cluster

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// MaxHosts bounds the names one hostlist may expand to.
const MaxHosts = 1 << 16

// errHostlist is wrapped by every hostlist syntax error.
var errHostlist = errors.New("cluster: bad hostlist")

// ExpandHostlist expands Slurm's compressed hostlist syntax, as in
// SLURM_STEP_NODELIST, into host names in order:
//
//	n[0-3,7]            n0 n1 n2 n3 n7
//	gpu[01-02],login    gpu01 gpu02 login
//	r[1-2]n[1-2]        r1n1 r1n2 r2n1 r2n2   (several groups: every combination, the first slowest)
//	n[8-10]-ib          n8-ib n9-ib n10-ib    (text after a group)
//
// Commas outside brackets separate expressions; inside brackets, ranges. A
// range lo-hi is inclusive, and zero-padded to the width of lo when lo has
// a leading zero (n[001-010]: n001...n010). Names are letters, digits and
// "-_.". Anything else (empty items, unbalanced or nested brackets, lo > hi,
// more than MaxHosts names) is an error, never a panic.
func ExpandHostlist(list string) ([]string, error) {
	if list == "" {
		return nil, fmt.Errorf("%w: empty", errHostlist)
	}
	exprs, err := splitTop(list)
	if err != nil {
		return nil, err
	}
	var hosts []string
	for _, e := range exprs {
		names, err := expandExpr(e, MaxHosts-len(hosts))
		if err != nil {
			return nil, fmt.Errorf("%w (in %q)", err, clip(list))
		}
		hosts = append(hosts, names...)
	}
	return hosts, nil
}

// splitTop splits list at the commas outside brackets.
func splitTop(list string) ([]string, error) {
	var exprs []string
	depth, start := 0, 0
	for i := 0; i < len(list); i++ {
		switch list[i] {
		case '[':
			if depth++; depth > 1 {
				return nil, fmt.Errorf("%w: nested '[' at byte %d of %q", errHostlist, i, clip(list))
			}
		case ']':
			if depth--; depth < 0 {
				return nil, fmt.Errorf("%w: ']' without '[' at byte %d of %q", errHostlist, i, clip(list))
			}
		case ',':
			if depth == 0 {
				exprs = append(exprs, list[start:i])
				start = i + 1
			}
		}
	}
	if depth != 0 {
		return nil, fmt.Errorf("%w: '[' not closed in %q", errHostlist, clip(list))
	}
	return append(exprs, list[start:]), nil
}

// expandExpr expands one expression: text and bracket groups, at most
// room names.
func expandExpr(e string, room int) ([]string, error) {
	if e == "" {
		return nil, fmt.Errorf("%w: empty name", errHostlist)
	}
	names := []string{""}
	for e != "" {
		open := strings.IndexByte(e, '[')
		if open < 0 {
			open = len(e)
		}
		if err := checkText(e[:open]); err != nil {
			return nil, err
		}
		for i := range names {
			names[i] += e[:open]
		}
		if open == len(e) {
			break
		}
		end := strings.IndexByte(e, ']') // splitTop checked balance
		group, err := expandGroup(e[open+1 : end])
		if err != nil {
			return nil, err
		}
		if len(names)*len(group) > room {
			return nil, fmt.Errorf("%w: more than %d names", errHostlist, MaxHosts)
		}
		next := make([]string, 0, len(names)*len(group))
		for _, n := range names {
			for _, g := range group {
				next = append(next, n+g)
			}
		}
		names, e = next, e[end+1:]
	}
	if len(names) > room {
		return nil, fmt.Errorf("%w: more than %d names", errHostlist, MaxHosts)
	}
	return names, nil
}

// checkText checks the text between groups.
func checkText(s string) error {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("%w: byte %q in a host name", errHostlist, c)
		}
	}
	return nil
}

// expandGroup expands the inside of one bracket group: "0-3,7", "01-02".
func expandGroup(g string) ([]string, error) {
	var out []string
	for item := range strings.SplitSeq(g, ",") {
		lo, hi, isRange := strings.Cut(item, "-")
		if !isRange {
			hi = lo
		}
		a, err := rangeBound(lo)
		if err != nil {
			return nil, err
		}
		b, err := rangeBound(hi)
		if err != nil {
			return nil, err
		}
		if a > b {
			return nil, fmt.Errorf("%w: range %q runs backwards", errHostlist, item)
		}
		if b-a >= MaxHosts || len(out)+b-a+1 > MaxHosts {
			return nil, fmt.Errorf("%w: more than %d names", errHostlist, MaxHosts)
		}
		width := 0
		if len(lo) > 1 && lo[0] == '0' {
			width = len(lo)
		}
		for n := a; n <= b; n++ {
			out = append(out, fmt.Sprintf("%0*d", width, n))
		}
	}
	return out, nil
}

// rangeBound reads one bound of a range: 1 to 9 decimal digits.
func rangeBound(s string) (int, error) {
	if s == "" || len(s) > 9 {
		return 0, fmt.Errorf("%w: range bound %q: want 1 to 9 digits", errHostlist, s)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("%w: range bound %q is not a number", errHostlist, s)
		}
	}
	n, _ := strconv.Atoi(s)
	return n, nil
}

// clip shortens s for an error message.
func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
