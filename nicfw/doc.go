// Package nicfw is xam's NIC firmware: an engine that runs inline in the
// application's thread or as a daemon on dedicated cores, with endpoint
// scheduling, a reliable transport of logical stop-and-wait channels with
// ACK/NACK and timer-driven retransmission, endpoint residency, flow
// control, extension modules and the mapper (AM-II, DVCM, GRIM).
//
// Status: not yet built; the package holds this description only.
package nicfw
