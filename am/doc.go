// Package am holds xam's Active Messages APIs: SSAM's request/reply with
// single-cell messages, AM-II's endpoints, virtual networks and
// return-to-sender, and GRIM's named handler registry.
//
// Status: not yet built; the package holds this description only.
package am
