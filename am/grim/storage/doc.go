// Package storage is GRIM's heterogeneous endpoint: a device-like GRIM
// endpoint, standing for the paper's I2O storage card, that serves a block
// store backed by a file to every host of the cluster.
//
// A Store is a GRIM endpoint of its own (its own channels in the host's
// firmware engine, reached through the engine daemon in firmware mode, so
// that it runs on a thread and core of its own beside the host's
// applications; Serve locks its goroutine to one). It registers two
// handlers by name with the cluster's registry, Config.Name+".read" and
// Config.Name+".write", so that any endpoint finds it by name (Open).
//
// The protocol, in GRIM's messages. A write is a bulk message to the
// write handler: args are the first block, the requester's completion
// handler and a tag; the data are whole blocks. The store writes them to
// the file in the handler and replies to the completion handler with the
// tag and a status. A read is a short message to the read handler: the
// first block, the block count, the requester's data handler and a tag.
// The handler queues it; Serve, outside the handlers, reads the blocks and
// sends them back in a bulk message to the data handler, with the tag and
// a status. A request the store cannot serve (blocks outside the store, a
// count that does not fit a bulk message, a write not of whole blocks)
// gets a status instead of data, which Client turns into an error.
//
// Client is the requesting side: synchronous Read and Write of blocks on a
// remote store, running the requester's endpoint until the answer is in.
package storage
