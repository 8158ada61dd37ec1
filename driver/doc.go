// Package driver is the SSAM device rebuilt on AF_XDP: Open allocates,
// pins and maps every buffer; connections are bound to virtual circuits at
// open; trap-style calls (send a cell or a batch, receive a batch,
// send-then-receive) take only a connection index and a buffer offset,
// checked with masks, never a pointer. A conventional system-call path
// (AF_PACKET) exists for comparison.
//
// Status: not yet built; the package holds this description only.
package driver
