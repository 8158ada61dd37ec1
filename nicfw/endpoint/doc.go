// Package endpoint is the memory an application shares with xam's NIC
// firmware engine: an endpoint's descriptor queues, its staging and receive
// areas and its event words, laid out in one memfd. It is what an
// application needs to use an endpoint (View, Map) and what the engine
// needs to serve one (Memory, NewMemory); it knows nothing of the engine,
// the transport or the daemon that hands the memfd over.
//
// An endpoint's memory (endpoint.go) is a memfd sealed against shrinking
// and growing, which the engine maps (NewMemory) and hands to the
// application, which maps it too (Map). It holds AM-II's four
// queues (request send, reply send, request receive, reply receive), each a
// single-producer/single-consumer ring of 96-byte descriptors with atomic
// free-running indices; the staging area, the application's, which medium
// and bulk messages are sent from and bulk messages are stored into; and
// the receive area, the engine's, which holds the bytes of received medium
// messages: one MaxMedium slot per entry of each receive queue, so that an
// entry's slot is the application's from the moment the engine puts the
// entry until the application releases it (Peek, Data, Release: the bytes
// are read in place). The application produces into the send queues and
// the engine consumes them with Take, which copies each descriptor out of
// the shared memory before checking it (class, argument count, destination
// index against the translation table's size, offset and length inside the
// staging area) and counts each refusal by reason (Stats.Refused).
// The engine produces into the receive queues with Put. The engine keeps
// each endpoint's translation table and tag (its virtual network; see
// Engine).
//
// Blocking wait: two words of the endpoint's header, on cache lines of
// their own, let an application sleep instead of polling and wake an
// engine that sleeps. The application arms an event mask (EventRequest,
// EventReply: a receive queue is not empty) with View.Arm, which
// looks at the queues after arming and says whether to block; Put, after
// publishing a descriptor into an armed queue, clears the mask and calls
// the function set with Memory.SetNotify (the daemon's writes the
// eventfd the application blocks on). The other way, an engine going to
// sleep sets the idle word (Memory.SetIdle) and looks at the send
// queues once more; View.Send, after publishing, calls the kick
// function set with SetKick (the daemon's writes the engine's eventfd) if
// the word is set. Each side writes its word before it reads the other's
// index, with sequentially consistent atomics, so no wake-up is lost
// (Memory.signal has the argument). The unix-socket hand-over of
// the memfd and the eventfds is the daemon's.
//
// Doorbells (bells.go): an endpoint the engine does not poll (not
// resident, or parked after a while idle) is marked in the engine's word
// (Memory.SetEvicted); View.Send then rings the endpoint's bit in a page
// of doorbells (Bells) that all of the application's endpoints share with
// the engine, which reads one summary word per page each Poll. The engine
// makes the page (NewBells) and writes each endpoint's bit into its
// header (Memory.SetBell); the application maps it (View.MapBells), which
// the header tells the engine (Memory.RingsBells). The header's own
// doorbell word rings too, for an engine that reads it.
//
// The memory's layout is versioned (5: receive area, event words,
// RemoteOffset, store region and handler count, doorbell, doorbell bit);
// Map refuses another version.
//
// Returned messages carry a Reason (reason.go); its numbers, and the
// engine's messages that carry descriptors between hosts, are in
// docs/wire.md.
package endpoint
