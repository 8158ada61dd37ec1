// Package coord is DVCM's sender coordination as a firmware module
// (nicfw.Module): a token per link, which a sender must hold before a
// large message leaves for the link's destination, so that several
// senders streaming to one receiver through a switch take turns on the
// switch's port toward it instead of overflowing its buffer together
// (incast).
//
// # Model
//
// In a star (hosts joined by one switch) the only link that several
// senders share on the way to host D is the switch's port toward D, so
// there is one token per destination host: the token of link D. Only the
// sending engines take part; D itself never holds its own link's token and
// hears nothing of it.
//
// The module is a nicfw.SendGate. A message of at most Config.Threshold
// bytes passes at once (the switch's buffer absorbs small messages and
// short bursts). A larger one leaves only while its host holds the token
// of its destination's link and no other endpoint of the host is using it;
// the token then stays with that endpoint until the message has left, or
// until Config.EarlyRelease bytes of it are left (Early Token Release: the
// token's next holder starts while the tail is on the wire), and passes on.
//
// On Ethernet a switch drops what its port cannot queue, where Myrinet's
// links held the sender back, so the module can pace the holder: with
// Config.LinkRate and Config.PortBuffer it estimates what the port queues
// (wire bytes sent, less what the port carried at LinkRate since, never
// below empty) and lets a chunk leave only while the estimate stays within
// three quarters of the buffer; the token passes on once the estimate is
// down to EarlyRelease, and the next holder starts from that estimate.
// The estimate counts a unit's wire bytes high, never low (its headers,
// whole cells, frames of a 1500-byte MTU): each holder starts from the
// last one's, so what an estimate missed would stay queued at a busy port,
// message after message, until it overflowed.
//
// # What pacing bounds
//
// The engine asks the gate about each unit (a message, or a bulk chunk)
// once, as it first leaves. Pacing therefore bounds what coordinated
// senders send for the first time: the port queues at most three quarters
// of PortBuffer of it (a unit larger than that leaves only onto an empty
// queue), beside what passes uncoordinated (messages of at most Threshold
// bytes, control messages). The transport's retransmissions are outside
// it: a unit not acknowledged within the transport's RetransmitAfter, or
// refused with a NACK (a full receive pool or queue), is sent again at
// once, whoever holds the token and whatever the port queues. A host then
// resends every unit to the destination not yet acknowledged (up to its
// endpoints' windows, at most the transport's Channels per host), each up
// to the transport's MaxPayload: a bulk chunk of the default 8.5 KB takes
// about 9.7 KB on the wire. Above the pacing bound the port has a quarter
// of PortBuffer to spare (4 KB of 16 KB), so a single chunk resent while
// another host's paced message fills the port overflows it, and what
// overflows is lost and resent in turn. Coordination with pacing keeps
// the port from dropping frames only while nothing is resent: while
// every unit is acknowledged within RetransmitAfter and the receiver
// refuses none. Engines that wait for a core (several inline engines on
// two CPUs) acknowledge late: give them a RetransmitAfter above that wait
// (`xam fw --retransmit`). TestPacingBound pins both sides: 3 senders with
// 4 ordered endpoints each, acknowledged in time, stay within the bound;
// acknowledged late, the first transmissions still do and the
// retransmissions overflow the buffer; TestPacingEstimate keeps a busy
// port within the bound over 72 messages.
//
// The protocol is DVCM's, with its four control messages, carried by the
// engine reliably and in order per destination host:
//
//   - UNI_REQ_LINK: a sender that wants the token asks the host it
//     suspects holds it (the last it heard of);
//   - BCAST_REQ_LINK: a sender that suspects nobody asks every host, and
//     so does one whose UNI_REQ_LINK went to a host that no longer holds
//     the token: that host answers REDIRECT (DVCM's holder forwarded the
//     request as a broadcast for its requester instead; here a request
//     speaks only for its sender, see Checks);
//   - GRANT_LINK: the holder passes the token on, to a requester, once it
//     is not sending (at once if it is idle);
//   - OWN_LINK_HINT: a holder that finishes with no request waiting tells
//     every host that it holds the token, so that their next requests go
//     to it alone; a holder that receives a request it cannot serve at
//     once (it is sending) tells the requester so, which tells the
//     requester that the token lives.
//
// Every host registers every request it hears. To make the order fair and
// the wait bounded, the token carries what the protocol needs to serve
// requests in turn (as Suzuki and Kasami's token does): the number of the
// last request of each host it served, and a queue of the hosts waiting
// for it. A host that receives the token adds the requests it registered
// and the token has not served; a holder that finishes passes the token to
// the head of the queue. A request is numbered per host, so a stale one (a
// request already served, heard late) is told apart and dropped; a sender
// that has waited long asks again by broadcast with the same number.
//
// The token of link D starts at the lowest host id in the host table other
// than D's (0 is an id like any other: the mapper numbers hosts from 0),
// which every host computes alike from the table. The table must be in
// place before coordinated traffic begins. The module follows this host's
// id in the engine's table: a table that gives the host another id (the
// mapper's first, which comes after the module has started) makes it
// forget what it knew of the links.
//
// Safety: a token exists once per link and moves only in GRANT_LINK
// messages, which the transport delivers exactly once: at every moment at
// most one host holds it, none while it travels.
//
// # Checks
//
// A control message is a claim by another host, and the module believes
// it only as far as it can check it (coord.go's Control, speaks and
// granted; each refusal is counted):
//
//   - it names a link of the host table other than this host's own, and
//     comes from a member of that link: a host of the table other than
//     the link's destination and this host (else Stats.Bad, Refused);
//   - it speaks for its sender alone: the requester, holder or sender it
//     names is the host it came from, so a request for the destination,
//     for a host the table does not know, or for any other host is
//     refused: a token granted to the destination or to no host would be
//     lost (Refused);
//   - it carries the link's current generation (recover.go): a request,
//     REDIRECT or GRANT_LINK may also carry the next recovery's, which a
//     holder raised to a QUERY this host has not received yet; anything
//     else is stale, replayed or forged (Stale), and a token of the
//     generation a recovery fenced off is dropped (Dropped);
//   - a GRANT_LINK is taken only by a host that does not hold the token,
//     waits for it, and is told it is served the very request it waits
//     on: any other is a second token, or one it did not ask for (Bad,
//     Refused). Two tokens that both circulate therefore end once they
//     serve one request: the second comes to a host that is served.
//
// # Recovery
//
// A token can be gone: its holder died (the engine tells the module of
// every host it gives up on: the transport's GiveUpAfter), or a GRANT_LINK
// was lost, or refused by a check above. A sender that waits for the token
// and learns of a death, or that has heard no sign of it for
// Config.LostAfter (no grant, no OWN_LINK_HINT from its holder, no
// recovery under way), has the link's coordinator, the lowest live host
// id other than the link's, recover it: a new generation of the token is
// proposed, every live host fences the link at it and answers whether it
// holds the token, and if none does the coordinator makes it anew, so
// that a lost token comes back without a host dying (recover.go says why
// a token still travelling cannot make a second).
//
// What an attacker on the segment can and cannot do to the coordination
// is in docs/security.md ("Coordination").
//
// docs/wire.md has the control messages' layout.
package coord
