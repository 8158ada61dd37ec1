// Package bench runs xam's experiments: the four papers' measurements next
// to today's peers (raw AF_XDP, kernel UDP, AF_PACKET), measured side by
// side in one run because absolute times drift on shared machines, and
// reported as JSON, Markdown tables and plots.
//
// The experiments are one table (experiments.go): each Spec names an
// experiment, the paper it reproduces, what the report says of it, the
// labs it needs, its time estimates and its run, which measures on the
// labs' hosts and returns a Result with its tables (Markdown) and, for
// the report's, its charts (PNG and SVG with gonum/plot, PlotRuns) and
// the figures the paper reported (Figures): SSAM's tables, AM-II's LogP and
// contention, bandwidth against message size, permutations on eight hosts
// and overcommitted endpoint frames, DVCM's incast and GRIM's figures, with
// UCX active messages over TCP (ucx_perftest) as a peer of AM-II's; the
// firmware engine's figures and the hostile suite beside them. Params
// carry the command's parameters, RunOptions (mode, progress, stop) into
// each run. A Report gathers the papers' results, a Section per paper:
// `xam bench all` builds each experiment's labs and runs it several
// times in a row (at least MinRuns), and each Figure holds the paper's
// value (or what the paper said in words), today's runs as a Measured
// (median, lowest, highest; Unsettled when they lie more than 2x apart)
// and today over each Peer of the same runs, run by run (figure.go,
// measured.go). Whether a paper's claim is reproduced is decided by a
// Claim, a stated rule on a figure's median (claims.go), judged on the
// report (Judge) and printed as its table. The plots are drawn from
// charts, each experiment's data of one run merged over the runs
// (chart.go, plot.go). The report is written as report.md and
// report.json (WriteFiles), which CheckReport checks for structure,
// recomputing every median, range, flag, ratio and verdict. Only cmd/xam
// imports this package (internal/lint).
//
// Under them are the ping-pongs behind `xam ping`: raw xam frames over
// AF_XDP sockets fed by xam's XDP program (RawPing, or RawPingFrom and
// datapath.Endpoint.Echo across two machines), kernel UDP (UDPPing) and the same frames
// through AF_PACKET sockets, one system call per frame (PacketPing). Round
// trips are recorded in an HDR histogram (1 ns to 1 minute, 3 significant
// digits). Each side spins: the pinger on its receive ring while it waits
// for the answer, the echo on its ring between frames; the kernel paths
// block in recvfrom, as ordinary programs do.
//
// Compare runs several of them in alternation, in rounds, and merges each
// path's round trips, so that a drift of the machine's speed over seconds
// falls on every path alike (BenchmarkPingCompare). On a shared 2-core VM
// the ratios still move from run to run (AM-II/raw 0.77-1.28 over four
// runs): compare several runs, not one.
//
// The cell layer's micro-benchmarks live in package cells, the socket's in
// package afxdp (go test -bench).
package bench
