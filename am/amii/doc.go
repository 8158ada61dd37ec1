// Package amii is AM-II's Active Messages (Mainwaring and Culler's AM-II
// API, as Chun et al. run it over Myrinet) on an endpoint of xam's NIC
// firmware engine (package nicfw): short, medium and bulk messages, and
// blocking wait. The API is one of a family with package ssam and package
// grim (see package am for the table): the same verbs where the operation
// is the same, the differences the papers' own.
//
// The endpoint. An Endpoint is the application's side of one nicfw endpoint:
// the mapping of its memory (endpoint.View) with AM-II's four queues.
// The endpoint belongs to a virtual network: the engine holds its tag and
// its translation table, and a request names its destination by an index
// into that table (an int, as every destination of the family), never by
// a global name. A received message names its sender by the sender's index
// in the receiver's table (Token.Source), NoIndex when the sender is not
// in it, and then it cannot be answered.
//
// Inline mode. The engine runs in the application's goroutine: Open
// makes an engine of its own on a link, New puts the endpoint on an
// engine the caller owns (several endpoints may share one). Poll runs the
// engine once and then the handlers of what it put into the request and
// reply receive queues; Request runs it after queuing the request, so the
// message leaves at once; Wait runs it until a message is there. A short
// message (a request or a reply) of an endpoint on an engine that it runs
// itself (Open, or New without Config.RunEngine), without Coalesce, takes
// the express path when the endpoint has nothing else to send and no other
// endpoint of the engine is busy sending: it is
// handed to the engine directly (nicfw.Engine.Express), checked as a
// queued one is, and leaves at once, without the send queue and without
// the rest of an engine run (Stats.Express counts them). Otherwise it is
// queued as above; what it is owed is the same either way. The replies of
// a Poll that finds several requests waiting are queued, so that they
// leave together in its last engine run, in one system call.
//
// The link Open takes is an AF_XDP socket with xam's XDP program in front
// of it: datapath.Open(datapath.Here(ifindex, mac), loader.ModeAuto, 0)
// returns it (its Link(): the UDP form's link where the Place's Encap asks
// for it; a lab host's place is datapath.OnHost), or afxdp.Open behind a
// program the caller loaded. Inline.Hosts maps the other hosts' ids to
// their addresses (MACs on raw Ethernet; Endpoint.Peer gives the UDP
// form's); this host is Inline.Host, not in the map. Host ids and the
// endpoint's id (VNet.ID) are the caller's to choose inline. A host that
// stops polling stops acknowledging: its peers' transports give up on
// what they sent it last and return it (endpoint.ReasonUnreachable), though it may
// have been delivered; and replies still unsent when an endpoint closes
// are lost, their requests coming back to the sender as endpoint.ReasonNoReply.
//
// Endpoint ids through a daemon: ids below daemon.FirstUserEndpoint (16)
// are for root and the daemon's user; others open ids from 16 up, or 0
// to have the daemon choose one (Dial returns it: Endpoint.Name). A peer
// addresses an endpoint by (host id, endpoint id) in its translation
// table, so an endpoint whose id the daemon chose must tell its peers
// the id (the daemon's Stats lists it), or choose its id itself.
//
// Firmware mode. The engine runs elsewhere (the daemon, on cores of its
// own): Dial opens the endpoint through the daemon's socket. Poll then only
// runs handlers; Wait arms the endpoint's events (endpoint.View.Arm) and
// blocks on the daemon's notification (an eventfd) unless a message is
// there already; a Request that must wait for a credit, and Drain, wait
// the same way; a send that finds its queue full, or no medium slot free,
// yields the processor until the engine has caught up. Both modes return
// the same Endpoint, whose Close releases everything its constructor made;
// afterwards, or once firmware mode's daemon has stopped, every call that
// sends, polls or waits returns ErrClosed.
//
// Messages. A message names a handler by its id (HandlerID: Handle,
// HandleMedium put a handler at an id the receiver chooses; Register,
// RegisterMedium at the next free one) and carries up to 8 64-bit words
// (MaxArgs). A short
// message carries nothing else. A medium message carries up to
// endpoint.MaxMedium bytes too: RequestMedium and Token.ReplyMedium copy
// them into a slot of the staging area (the one copy at the sender), the
// engine copies them into the message when it takes it, and the receiver's
// handler gets them in place in its endpoint's receive area (no copy at the
// receiver), valid while it runs. A bulk message (Store) carries any
// length from the application's part of the staging area (Staging) into a
// region of the receiving endpoint's staging area, in chunks, and runs its
// handler there once all of it is stored, with the stored bytes. Requests
// go into the request send queue, replies into the reply send queue; the
// engine sends replies first. The request/reply discipline is SSAM's and
// its violations report the same ErrDiscipline: a request handler sends at
// most one reply and no request, a reply handler and the error handler send
// nothing, and no handler polls or waits.
//
// The staging area. Its last MediumSlots*endpoint.MaxMedium bytes are the
// medium slots; the rest (Staging) is the application's, for bulk data to
// send and for peers' Stores to land in. A slot is free again as soon as
// the engine has taken the message in it (endpoint.View.Progress).
// Requests hold at most all slots but one, so a reply always finds one
// after the engine has moved on. The application keeps a Store's region
// unchanged until the request is answered (the engine reads it chunk by
// chunk) and decides with its peers where their Stores may write. The
// engine lets a Store write only the receiver's application part (newEndpoint
// sets the endpoint's store region to it): a region that reaches into the
// medium slots, or past the staging area, comes back with ReasonRange.
//
// Implicit replies. A request handler that returns without replying gets
// a reply sent on its behalf to NullReply, a handler index that runs
// nothing at the requester: every delivered request is answered, which is
// what makes user credits work (below). The implicit replies one Poll owes
// a requester leave together, as one reply whose first argument is how
// many requests it answers, so that a stream of requests costs its
// receiver one reply per Poll rather than one per request. A request from
// a sender outside the receiver's translation table cannot be answered and
// is not.
//
// User credits. An endpoint has at most K requests outstanding
// (Config.Credits): a request takes a credit, and its reply (explicit
// or implicit) or its return to sender gives it back. Request, with no
// credit left, polls until one comes back, for at most Config.GiveUp,
// and then reports ErrTimeout. The engine's stop-and-wait channels and its
// NACKs of full receive queues do the rest of the flow control.
//
// Return to sender. A message the engine cannot deliver (bad tag, no such
// endpoint, endpoint closed, unknown or unreachable host, too large for the
// transport, a bulk region outside the receiver's application part, a
// request to a handler index the receiver has not registered) comes back
// into the sender's reply receive queue marked returned
// (endpoint.Descriptor.ReturnInfo); Poll hands it to the error handler set
// with OnReturn, as a Returned with the reason and the original message (a
// medium message with its bytes). A returned request gives back its credit.
// A request whose reply does not come within Config.ReplyTimeout (its
// receiver took it and then died or restarted, or a reply was itself
// returned on the way back) is presumed lost: it comes back to the error
// handler with endpoint.ReasonNoReply (a medium request without its bytes)
// and gives its credit back, so credits are never lost for good. A reply
// that comes after its request timed out still runs its handler. AM-II
// replies do not name their request, so a reply ends the oldest request
// outstanding to its sender (a table that names the sender at several
// indices: to any of them). A request past its timeout therefore stays
// awaited, its credit given back and no longer counted (Outstanding,
// Drain), so that its late reply (or late return, only counted) ends it
// and not the request sent after it; it is no longer awaited once its
// destination's host restarts (a message from it carries another
// incarnation, endpoint.Descriptor.Incarnation, or a request to it comes
// back ReasonRestarted), its endpoint closes (ReasonClosed,
// ReasonNoEndpoint) or it leaves the host table (ReasonNoHost):
// Stats.Forgotten counts those (a return that still comes for one is only
// counted, in Stats.LateReplies). A host that took
// requests and restarted before this endpoint heard from it at all is not
// told from its new incarnation. The timer starts when Poll's timers first see
// a request (every few dozen polls), or a Wait does. A Wait ends when a
// request's timeout passes, and the next Poll hands it over. With the
// default Config.GiveUp, a request that waits for a credit held by
// requests unanswered waits for the timer to give one back.
//
// Threads. By default an Endpoint, like the engine it drives in inline mode,
// belongs to one goroutine: every method, and every handler, runs in it.
// With Config.Shared it may be used by several goroutines at once: one
// blocked in Wait while others send requests, several polling, several
// sending. Every method then takes the endpoint's lock, and handlers run
// holding it, in the goroutine whose Poll (or Request, Wait, Drain) found
// their messages; so at most one handler of the endpoint runs at a time,
// and a handler sees the endpoint as it would in one goroutine. A blocking
// wait releases the lock while it blocks (firmware mode: in
// the blocking wait; a full queue: while yielding), and inline mode's Wait
// releases it between runs of the engine, so others get their turn; the
// poll function of inline mode is called with the lock held, one
// goroutine at a time. Register, RegisterMedium and OnReturn are to be
// called before the endpoint is shared. A handler may call only its
// Token: a handler that calls its own endpoint's methods finds the lock
// held (by its own goroutine), which Shared cannot tell apart from another
// goroutine's handler running; it waits for at most the give-up time and
// then gets ErrDiscipline (without Shared, ErrDiscipline comes at once).
// Stats and Outstanding called from a handler in Shared mode likewise wait
// and then return zero values. The endpoint's notification wakes one
// blocked goroutine: in Shared mode the others wait for a Poll to take
// messages, the one blocked wakes at least every few milliseconds, and
// Wait may return with nothing to poll (another goroutine ran the
// handlers); its callers loop.
//
// The engine's messages and the reasons of return are in docs/wire.md.
package amii
