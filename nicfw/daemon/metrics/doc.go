// Package metrics exports a firmware daemon's counters (package
// nicfw/daemon) to Prometheus: a prometheus.Collector that, at every
// scrape, reads one snapshot of the daemon (Daemon.Stats, taken in the
// engine thread between two of its loops, so that its counters agree with
// each other), the XDP program's counters (loader.Program.Counters, summed
// over CPUs) and the AF_XDP socket's counters with the kernel's
// XDP_STATISTICS (afxdp.Socket.Stats), and turns them into metrics. Nothing
// is counted for it on the engine's path: the engine's counters are plain
// fields of the engine thread (nicfw's counters.go), and a scrape costs the
// engine one snapshot. `xam fw --metrics ADDR` serves it over HTTP.
//
// The metrics, all prefixed xam_ (counters end in _total, units are in
// the names; docs/firmware.md lists them):
//
//   - per endpoint (label endpoint, its id): the messages and data bytes
//     sent and received, the messages returned to it by reason (label
//     reason), the descriptors the engine refused by reason, the
//     descriptors waiting in each of its four queues (label queue) and the
//     puts that found a receive queue full;
//   - per peer host (label peer, its id in the host table): the
//     transport's messages and payload bytes both ways, retransmissions,
//     NACKs sent, messages given up on and in flight, and the messages
//     returned to and from the host by reason;
//   - the engine's loops and those that found work (busy fraction:
//     rate(xam_engine_busy_polls_total) / rate(xam_engine_polls_total)),
//     its sleeps and every counter of the engine, transport, residency,
//     modules and mapper (xam_engine_*, xam_transport_*, ...: the fields
//     of their Stats structs, by name), the modules' own (xam_module_value);
//   - the daemon's endpoints, connections, refused requests, host table
//     size and mapper epoch;
//   - the XDP program's counters (xam_xdp_*) and the socket's
//     (xam_xsk_*, XDP_STATISTICS among them).
//
// Virtual network tags, capabilities, are never exported: the metrics are
// served to whoever reaches the address.
package metrics
