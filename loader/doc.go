// Package loader builds, loads and attaches xam's XDP program with
// cilium/ebpf. The program steers frames of xam's EtherType (and, when
// configured, xam's destination MAC) to the AF_XDP socket of the receiving
// queue through an XSKMAP and returns XDP_PASS for everything else and for
// any redirect miss, so the host's own traffic is never disturbed. It keeps
// per-CPU counters, can check each cell's HEC and admit only configured
// VPI/VCI pairs (SSAM's kernel VCI table), and can inject faults (drop,
// corrupt; duplicate through a tcx program on a bridge port) at seeded
// rates for tests. Attachment is through a bpf_link, so the program goes
// away when its owner dies.
//
// Status: not yet built; the package holds this description only.
package loader
