// Package am names xam's Active Messages APIs, one package per paper:
//
//   - am/ssam: SSAM, von Eicken et al.'s single-cell Active Messages over
//     ATM, on a driver.Device (the trap-style kernel path);
//   - am/amii: AM-II, Mainwaring and Culler's API with virtual networks,
//     on an endpoint of the firmware engine (nicfw), inline or through a
//     firmware daemon;
//   - am/grim: GRIM, Ulmer and Yalamanchili's logical channels, optimistic
//     flow control and named handlers, on the firmware engine.
//
// Each message names a handler that runs when it arrives; communication is
// request/reply: a request handler may send one reply, a reply handler
// sends nothing, which rules out deadlock without flow control in the
// network.
package am
