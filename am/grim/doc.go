// Package grim is GRIM's messaging layer (Ulmer and Yalamanchili's
// messaging layer for heterogeneous endpoints) on xam's NIC firmware
// engine (package nicfw): in inline mode (Open, or New on an engine the
// caller built: the engine runs in the endpoint's goroutine) or firmware
// mode (Dial: the engine daemon of the host runs it on a core of its own
// for every endpoint of the host, so that an application and a device
// endpoint such as package storage's share the host's NIC, each on its own
// thread). The API is one of a family with package ssam and package amii
// (see package am for the table): the same verbs where the operation is
// the same, the differences the papers' own.
//
// Logical channels. An endpoint owns one or more outbound logical channels
// (Config.Channels), each an engine endpoint of its own: a header ring
// (the request and reply send queues), a payload region (part of its
// staging area) and status registers (the rings' indices). The goroutine
// that owns the endpoint injects into its channels with no lock and no
// system call; the engine serves the channels of all endpoints round robin,
// weighted (Config.Weights) for QoS. A message names its destination by
// its index in Config.Peers (an int, as every destination of the family),
// and its sender's peer index and channel (Token.Source). A channel's
// messages arrive in the order sent, whatever the engine's window: its
// engine endpoint is Ordered (nicfw.VNet), so a message leaves once the
// one before it to the same host is acknowledged, while the chunks of a
// bulk message fly together up to the window. Channel.Outstanding counts a
// channel's requests not yet answered. Injection is a descriptor written
// into the channel's ring, never a system call; inline, the engine sends
// it when the endpoint polls. Two short messages leave at once instead,
// handed to the engine directly (the express path, nicfw.Engine.Express;
// counted in Stats.Express), when their channel has nothing before it and
// no other channel of the engine is busy sending: a request that the
// application sends on a channel with no request outstanding (the
// request/reply case: it leaves in the send, not the next Poll), and the
// short reply to the only request a Poll finds. Further requests while one
// is outstanding, and the replies to several requests, are queued, to
// leave together in the engine's next run.
//
// Optimistic flow control. Bulk messages (up to MaxBulk bytes) are the
// engine's pooled bulk messages: the sending engine fragments them, and
// the receiving engine finds each a block of the receiving endpoint's one
// receive pool (Config.PoolSize) as its first fragment arrives, refusing it
// (NACK) while the pool is exhausted, and the sender's transport sends it
// again after its back-off. Nothing is reserved per peer. The first
// fragment travels alone and the rest follow once it is taken, and such
// probes never hold every channel to a host, so a full pool delays
// messages, whatever the number of senders and channels, and never wedges
// them.
//
// Injection. Store-and-forward (the default): Bulk and Write copy the whole
// message into the channel's payload region, then queue its descriptor.
// Cut-through (Config.CutThrough, or Channel.Stream for a writer that
// produces the bytes as it goes): the first Segment bytes are written and
// published in the message's status register (the word before its bytes;
// endpoint.CutThrough), the descriptor is queued, and growing segments
// follow, each published as it is written; the engine sends what is
// published and waits for the rest, never sending a byte not yet written.
// The payload region is a ring; a slot is written again once every request
// sent before it was answered.
//
// Messages. Short: a handler id and four 32-bit integers (Channel.Short).
// Bulk: the same and up to MaxBulk bytes, which the handler gets in place
// in the pool (Channel.Bulk). Memory: a block copy into a region the
// receiver exposes (Endpoint.Memory; Channel.Write), no handler, completed
// back to the writer (Stats.Completed; Endpoint.Drain waits until every
// request, memory messages included, is answered). Requests and replies
// follow the other APIs' discipline: a request handler replies at most
// once (Token.Reply), and one that does not is answered for it. A reply that
// finds the reply queue full waits for the next Poll; none is dropped, so
// every request is answered or returned.
//
// Return to sender. A message that cannot be delivered (no such endpoint
// or handler, a memory message outside the receiver's region, an
// unreachable host: the engine's reasons) comes back to its sender, and so
// does a request whose answer does not come within Config.ReplyTimeout
// (ReasonNoReply: its receiver took it and then closed or died). Poll hands
// each to the error handler (OnReturn) as a Returned: the reason, the
// channel, the destination, the handler, the integers and a bulk or memory
// message's length. A request for a handler id the receiver has not
// registered comes back with ReasonNoHandler (returned by the engine for
// ids above every registered one, answered by the receiver's layer with
// HandlerNoHandler for the others).
//
// Errors. Misuse is an error, never a panic: a channel that does not exist
// (ErrChannel), a destination outside Config.Peers (ErrBadDest), more than
// ShortArgs integers (ErrTooLarge), any call once the endpoint is closed
// or its daemon stopped (ErrClosed). A send whose channel is full runs the
// engine (inline) or waits for the daemon's until there is room, for at
// most Config.GiveUp (ErrTimeout); from a handler, which may not run the
// engine, it is ErrBusy.
//
// Named handlers. Handle puts a handler at an id on this endpoint, as in
// package ssam and package amii; HandleNamed does so and names it too, for
// the cluster's registry (GRIM's own). Publish sends this endpoint's named
// handlers to the central endpoint (Config.Peers[0]), which merges every
// endpoint's into one table, refuses a name under a second id (or an id
// under a second name) with ErrConflict, and sends the table to every
// endpoint that published, now and whenever it changes; an endpoint that
// publishes later gets it then. Lookup and Owner read the local copy.
// Predefined handlers (HandlerRegister, HandlerTable, HandlerMemory,
// HandlerNull, HandlerNoHandler) exist on every endpoint.
//
// Threads. An Endpoint belongs to one goroutine, which also runs its
// engine (Poll); its handlers run inside Poll and must not poll or wait.
// Wait waits for a message: in firmware mode it sleeps on the daemon's
// notification; inline it runs the engine until a message is there or its
// timeout passes.
package grim
