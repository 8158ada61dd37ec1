// Package bench runs the experiments of the four papers next to today's
// peers (raw AF_XDP, kernel UDP, AF_PACKET), measured side by side in one
// run, and reports them as JSON, Markdown tables and plots.
//
// Status: not yet built; the package holds this description only. The
// cell layer's benchmarks live in package cells (go test -bench . ./cells).
package bench
