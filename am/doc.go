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
//
// # One family
//
// The three packages stand alone (none imports another), but they are one
// family: where two of them do the same thing it has the same name, the
// same argument order and the same result, and where they differ the
// difference is a paper's. The table gives each operation by paper; a
// number in the last column points to the note below that says which
// paper a difference comes from.
//
//	operation                SSAM                            AM-II                               GRIM                                   note
//	open inline              Open(link, peer, cfg)           Open(link, in, vn, cfg)             Open(link, in, cfg)                    1
//	open on engine/device    New(dev, cfg)                   New(eng, vn, cfg)                   New(eng, cfg)                          1
//	open through a daemon    -                               Dial(socket, vn, cfg), DialNew      Dial(socket, cfg)                      2
//	register a handler       Handle(id, h); Register(h)      Handle, HandleMedium;               Handle(id, h); HandleNamed(name,       3
//	                                                         Register, RegisterMedium            id, h), Publish, Lookup, Owner
//	send a request           Request(dest, h, data)          Request(dest, h, args...)           Channel.Short(dest, h, args...)        4
//	reply                    Token.Reply(h, data)            Token.Reply(h, args...),            Token.Reply(h, args...)                4
//	                                                         Token.ReplyMedium(h, data, args...)
//	bulk/store               Request with up to MaxMessage   Store(Bulk), RequestMedium          Channel.Bulk, Channel.Stream,          5
//	                         bytes; RequestBuffered                                              Channel.Write (memory)
//	sender of a message      Token.Source() int              Token.Source() int                  Token.Source() (peer, channel int)     6
//	outstanding requests     Outstanding(c)                  Outstanding()                       Channel.Outstanding()                  7
//	wait for completions     Drain(timeout)                  Drain(timeout)                      Drain(timeout)
//	poll                     Poll() (int, error)             Poll() (int, error)                 Poll() (int, error)
//	wait for a message       -                               Wait(timeout) (ready, err)          Wait(timeout) (ready, err)             8
//	returned messages        OnReturn(func(ssam.Returned))   OnReturn(func(amii.Returned))       OnReturn(func(grim.Returned))          9
//	close                    Close(), then ErrClosed         Close(), then ErrClosed             Close(), then ErrClosed
//	stats                    Stats() Stats                   Stats() Stats                       Stats() Stats                          10
//	errors                   ErrDiscipline, ErrTooLarge, ErrBadDest, ErrNoHandler, ErrTimeout, ErrConfig, ErrConflict, ErrClosed     11
//
// Shared throughout: a destination is an int (an index: SSAM's connection,
// AM-II's translation table entry, GRIM's entry of Config.Peers); a handler
// is a HandlerID; Config is the last argument of every constructor, after
// where the endpoint lives (a link, a device or engine, a daemon's socket)
// and whom it reaches; every endpoint has Config() and Name() where it has
// a name, a Handler type and a Token; Token.IsRequest says whether a
// handler runs for a request; a handler that polls, waits, drains or closes
// its endpoint, or breaks request/reply, gets ErrDiscipline.
//
// Notes, the papers' differences:
//
//  1. What an endpoint lives on and reaches is the paper's: SSAM's is a
//     device with a connection per peer (Open makes one to peer on
//     ssam.VCI); AM-II's an engine endpoint in a virtual network (VNet:
//     its id, tag and translation table); GRIM's the channels of an
//     endpoint of a cluster (Config.Peers, Config.Self). Open makes the
//     device or engine and Close closes it; New leaves it to the caller.
//  2. SSAM has no daemon: its device is the process's own and its traps
//     the kernel's. AM-II's DialNew has the daemon draw a new network's
//     tag; a GRIM cluster is given its tag (Config.Tag).
//  3. Handle means the same in all three: a handler at an id the
//     application chooses, so that senders need not know the order of
//     registration; a taken id is ErrConflict. Register means the same in
//     SSAM and AM-II: a handler at the next free id, which it returns.
//     GRIM has no Register: its handler ids are the cluster's, agreed on
//     by number (Handle) or published by name to the cluster-wide
//     registry of named handlers, the paper's own. That is HandleNamed
//     (Handle with a name) and Publish (send the names to the central
//     endpoint, wait for the merged table), which no other paper has, and
//     so names of their own: a Register that published a name in one
//     package and allocated an id in the others would surprise. Publish
//     is no relation of SSAM's Sync, which begins a requester's session
//     on a connection (SSAM's sync cells, Stats.Syncs) and has no
//     counterpart in the firmware's APIs; the two keep distinct names.
//     AM-II's medium and bulk handlers (HandleMedium, RegisterMedium)
//     are its message classes.
//  4. The arguments are each paper's: SSAM's data bytes (40 in a single
//     cell, more as an AAL5 PDU), AM-II's up to 8 64-bit words (MaxArgs),
//     GRIM's four 32-bit integers (ShortArgs). GRIM sends on one of an
//     endpoint's logical channels (Endpoint.Channel), so its sends are
//     methods of Channel, and a GRIM message is Short, Bulk or memory by
//     the paper's classes.
//  5. Bulk data by paper: SSAM carries a longer message as an AAL5 PDU
//     (up to Config.MaxMessage, from the exported next send buffer with
//     RequestBuffered); AM-II's medium messages copy up to MaxMedium bytes
//     through a staging slot and its Store writes a region of the
//     receiver's staging area; GRIM's bulk messages land in the receiver's
//     pool (optimistic flow control), Stream writes one cut-through, and
//     Write is a memory message with no handler.
//  6. The sender is named as the destination that reaches it: SSAM's
//     connection, AM-II's index in the receiver's table (amii.NoIndex for
//     a sender outside it, which cannot be answered), GRIM's peer index and
//     the logical channel it sent on.
//  7. Flow control is the paper's: SSAM's window per connection, AM-II's
//     credits per endpoint, GRIM's requests per logical channel.
//  8. SSAM polls only. AM-II and GRIM wait: firmware mode sleeps on the
//     daemon's notification, inline mode runs the engine.
//  9. SSAM's only return is a request its responder had no handler for.
//     AM-II and GRIM return what the engine cannot deliver (its reasons)
//     and what goes unanswered past Config.ReplyTimeout (ReasonNoReply);
//     GRIM's error handler may send without waiting, AM-II's sends nothing.
//     Each Returned names the destination in Dest and the handler in
//     Handler.
//  10. Requests, Replies (the replies handlers sent), Handled (request
//     handlers run), ReplyHandled, HandlerErrors (messages for a handler
//     the receiver does not have) and Returned mean the same in all three;
//     the other counters are the paper's mechanisms: the answer sent for a
//     handler that did not reply (SSAM's Acks, AM-II's and GRIM's
//     NullReplies), SSAM's retransmissions, sessions and forgeries,
//     AM-II's medium messages and Stores, GRIM's classes, completions and
//     registry.
//  11. The errors every package has, with the same meaning; each has its
//     own besides (SSAM's none, AM-II's ErrUnknownSender, ErrNoMediumSlots
//     and ErrBadRegion, GRIM's ErrBusy, ErrShort and ErrChannel). A
//     firmware endpoint whose daemon stopped returns an error that is
//     both its package's ErrClosed and daemon.ErrClosed.
package am
