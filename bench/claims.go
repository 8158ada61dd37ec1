package bench

import (
	"cmp"
	"fmt"
	"math"
	"path"
	"strings"
)

// Whether a paper's figure is reproduced is decided here, by a stated
// criterion read from the report's figures, not asserted in prose: each
// Claim names the figure it reads (an experiment's figure, by a pattern
// of its name), what of it (today's value, today over the paper's, or
// today over a peer's of the same runs), and the rule its median must
// meet. The report prints every claim with its verdict (Judge).

// A Claim is one of a paper's findings and the criterion that decides
// whether today's runs reproduce it.
type Claim struct {
	Paper      string `json:"paper"`      // the section: SSAM, AM-II, DVCM, GRIM
	Experiment string `json:"experiment"` // the experiment whose figure it reads
	// Figure is a pattern of the figure's name (path.Match: * stands for
	// what a run's parameters put in the name); the first figure it
	// matches is read.
	Figure string `json:"figure"`
	// Of says what of the figure the rule reads: OfToday its value,
	// OfPaper its value over the paper's, else the name of a peer: its
	// value over the peer's, run by run.
	Of         string `json:"of"`
	Says       string `json:"says"`        // the paper's finding, in words
	PaperValue string `json:"paper_value"` // the paper's figure, in words
	Rule       Rule   `json:"rule"`
}

// What a Claim reads of its figure besides a peer's name.
const (
	OfToday = "today"
	OfPaper = "paper"
)

// A Rule holds where Lo <= median <= Hi; an infinite bound is open.
type Rule struct {
	Lo float64 `json:"lo"`
	Hi float64 `json:"hi"`
}

// JSON cannot carry the infinities: an open bound is the largest float.

// atMost is the rule v <= hi.
func atMost(hi float64) Rule { return Rule{Lo: -math.MaxFloat64, Hi: hi} }

// atLeast is the rule v >= lo.
func atLeast(lo float64) Rule { return Rule{Lo: lo, Hi: math.MaxFloat64} }

// within is the rule lo <= v <= hi.
func within(lo, hi float64) Rule { return Rule{Lo: lo, Hi: hi} }

// holds reports whether v meets the rule.
func (r Rule) holds(v float64) bool { return r.Lo <= v && v <= r.Hi }

// String prints the rule as the report states it: "≤ 1", "≥ 0.5", "in
// [1.2, 2]".
func (r Rule) String() string {
	switch {
	case r.Lo <= -math.MaxFloat64:
		return fmt.Sprintf("≤ %g", r.Hi)
	case r.Hi >= math.MaxFloat64:
		return fmt.Sprintf("≥ %g", r.Lo)
	}
	return fmt.Sprintf("in [%g, %g]", r.Lo, r.Hi)
}

// Criterion states what the claim's rule reads of figure (the figure's
// name, or c.Figure) and where its median must lie.
func (c Claim) Criterion(figure string) string {
	switch c.Of {
	case OfToday:
		return figure + " " + c.Rule.String()
	case OfPaper:
		return figure + " / the paper's " + c.Rule.String()
	}
	return figure + " / " + c.Of + " " + c.Rule.String()
}

// A Verdict says whether a claim is reproduced.
type Verdict string

// The verdicts: the median meets the rule (Yes) or not (No); the runs of
// what the rule reads disagree by more than 2x (Unsettled: the median
// decides nothing); or the figure was not measured.
const (
	Yes         Verdict = "yes"
	No          Verdict = "no"
	Unsettled   Verdict = "unsettled"
	NotMeasured Verdict = "not measured"
)

// judge decides a rule on m, what it reads: Unsettled when m's runs
// disagree by more than 2x, else whether its median meets the rule.
func judge(r Rule, m *Measured) Verdict {
	switch {
	case m == nil || !m.Measured():
		return NotMeasured
	case m.Unsettled:
		return Unsettled
	case r.holds(m.Median):
		return Yes
	}
	return No
}

// A ClaimResult is a claim judged on a report's figures.
type ClaimResult struct {
	Claim
	Criterion string    `json:"criterion"`
	Matched   string    `json:"matched,omitempty"` // the figure's name
	Measured  *Measured `json:"measured,omitempty"`
	Verdict   Verdict   `json:"verdict"`
}

// read returns what c reads of figs (an experiment's figures): the name
// of the figure it matched and the value; none where no figure matches
// or the figure lacks what c reads.
func (c Claim) read(figs []Figure) (string, *Measured) {
	for _, f := range figs {
		if ok, _ := path.Match(c.Figure, f.Name); !ok {
			continue
		}
		switch c.Of {
		case OfToday:
			m := f.Today
			return f.Name, &m
		case OfPaper:
			return f.Name, f.VsPaper
		}
		for _, p := range f.Peers {
			if p.Name == c.Of {
				return f.Name, p.Ratio
			}
		}
		return f.Name, nil
	}
	return "", nil
}

// Judge judges each claim on the report's figures, in the claims' order.
func (r *Report) Judge(claims []Claim) []ClaimResult {
	figs := map[string][]Figure{}
	for _, s := range r.Sections {
		for _, e := range s.Experiments {
			figs[e.Name] = e.Figures
		}
	}
	var out []ClaimResult
	for _, c := range claims {
		name, m := c.read(figs[c.Experiment])
		out = append(out, ClaimResult{Claim: c, Criterion: c.Criterion(cmp.Or(name, c.Figure)), Matched: name, Measured: m, Verdict: judge(c.Rule, m)})
	}
	return out
}

// claimsMarkdown writes the table of judged claims.
func claimsMarkdown(b *strings.Builder, claims []ClaimResult) {
	fmt.Fprintf(b, "| paper | claim | paper's figure | criterion (`experiment`: figure, median) | measured: median [min–max] | reproduced? |\n|---|---|---|---|--:|---|\n")
	for _, c := range claims {
		fmt.Fprintf(b, "| %s | %s | %s | `%s`: %s | %s | **%s** |\n", c.Paper, c.Says, c.PaperValue, c.Experiment, c.Criterion,
			c.Measured.orNone(), c.Verdict)
	}
}

// orNone prints m, or "—" when there is none.
func (m *Measured) orNone() string {
	if m == nil {
		return "—"
	}
	return m.String()
}

// Claims are the papers' findings that the report decides, each with
// its criterion. A finding the lab cannot show (docs/reproduction.md says
// why) is decided all the same: its verdict says what the lab shows.
func Claims() []Claim {
	return []Claim{
		{Paper: "SSAM", Experiment: "ssam", Figure: "trap: send16", Of: "AF_PACKET system call",
			Says: "a batch of cells in one trap costs a fraction of a system call per cell", PaperValue: "the traps against the read/write system-call path (values not in the source text)",
			Rule: atMost(0.5)},
		{Paper: "SSAM", Experiment: "ssam", Figure: "trap: recv16", Of: "AF_PACKET system call",
			Says: "reading a batch of cells through the trap costs a fraction of a system call per cell", PaperValue: "as above",
			Rule: atMost(0.5)},
		{Paper: "SSAM", Experiment: "ssam", Figure: "round trip, small message, p50", Of: "kernel UDP",
			Says: "Active Messages round trips are faster than the kernel's sockets", PaperValue: "~20 µs, a fraction of the kernel path's",
			Rule: atMost(1)},
		{Paper: "AM-II", Experiment: "logp", Figure: "round trip, short message (reliable, protected)", Of: "baseline (unreliable, unprotected)",
			Says: "reliability and protection add little to the round trip", PaperValue: "42 µs round trip; small increments",
			Rule: atMost(1.5)},
		{Paper: "AM-II", Experiment: "logp", Figure: "aggregate message rate, * clients to one server", Of: "1 client",
			Says: "n clients to one server keep the server's peak rate", PaperValue: "within the peak 1/g",
			Rule: atLeast(0.8)},
		{Paper: "AM-II", Experiment: "logp", Figure: "round trip slope per added client", Of: "LogP g",
			Says: "the round trip grows by g per added client", PaperValue: "slope = g",
			Rule: within(0.5, 2)},
		{Paper: "AM-II", Experiment: "permutations", Figure: "circular shift: average bandwidth per host", Of: "one pair alone",
			Says: "a circular shift runs near the peak of one pair", PaperValue: "near the peak",
			Rule: atLeast(0.5)},
		{Paper: "AM-II", Experiment: "overcommit", Figure: "server message rate, 8x overcommitted*", Of: "1x",
			Says: "overcommitted endpoint frames degrade gracefully", PaperValue: "graceful at 8x and more",
			Rule: atLeast(0.5)},
		{Paper: "DVCM", Experiment: "incast", Figure: "goodput of * senders at * B over one sender's, no coordination", Of: OfToday,
			Says: "without coordination, goodput collapses", PaperValue: "nearly zero above ~600-byte messages",
			Rule: atMost(0.1)},
		{Paper: "DVCM", Experiment: "incast", Figure: "goodput of * senders at * B over one sender's, coordinated", Of: OfToday,
			Says: "a token per link keeps a large fraction of one sender's goodput", PaperValue: "a large fraction of the link, loss under 0.1%",
			Rule: atLeast(0.8)},
		{Paper: "DVCM", Experiment: "incast", Figure: "goodput of * senders at * B over one sender's, early token release", Of: OfToday,
			Says: "Early Token Release brings several senders close to one", PaperValue: "two senders close to one",
			Rule: atLeast(0.8)},
		{Paper: "GRIM", Experiment: "grim", Figure: "host-to-host round trip, short message, p50", Of: OfPaper,
			Says: "a host-to-host round trip of the paper's order", PaperValue: "13 µs",
			Rule: atMost(2)},
		{Paper: "GRIM", Experiment: "grim", Figure: "injection overhead, one short message", Of: OfPaper,
			Says: "injecting a short message costs about a microsecond", PaperValue: "~1 µs",
			Rule: atMost(1)},
		{Paper: "GRIM", Experiment: "grim", Figure: "round trip with * logical channels over 1", Of: OfToday,
			Says: "latency is nearly flat for a few logical channels", PaperValue: "nearly flat",
			Rule: atMost(1.5)},
		{Paper: "GRIM", Experiment: "grim", Figure: "gap, burst of 1000 (answered)", Of: OfPaper,
			Says: "the gap past 1,000 messages is the paper's", PaperValue: "20 µs per message",
			Rule: within(0.5, 2)},
		{Paper: "GRIM", Experiment: "grim", Figure: "bandwidth, 48 KB, cut-through", Of: "store-and-forward",
			Says: "cut-through beats store-and-forward", PaperValue: "106 vs 74 MB/s (1.43x)",
			Rule: atLeast(1.2)},
		{Paper: "GRIM", Experiment: "grim", Figure: "host to storage endpoint, p50", Of: "host to host, firmware mode",
			Says: "the storage endpoint answers within a small factor of a host", PaperValue: "21 vs 13 µs (1.6x)",
			Rule: within(1, 2)},
	}
}
