// Package driver is the SSAM device (von Eicken et al., "Low-Latency
// Communication over ATM Networks using Active Messages") rebuilt on an
// afxdp.Link: connections bound to ATM virtual circuits at open, buffers
// allocated, pinned and mapped at open, and trap-style calls that take
// only small integers. The Active Messages layer (package am/ssam) runs on top.
//
// # The SSAM mapping
//
//	SSAM (SBA-100, SunOS)                      xam
//	open: kernel allocates, pins, maps buffers  Open: one mmap, mlocked, carved into areas
//	(process, connection) -> VC table           Config.Conns: index -> VPI, SendVCI/RecvVCI
//	"next send buffer" pointer                  NextSend(conn) -> slot; SendArea(conn)
//	write trap (one cell)                       Send(conn, offset, flags)
//	                                            SendBatch(conn, offset, count, flags)
//	read trap (a batch of cells)                Recv(max), then Take(conn)
//	write-read trap                             SendRecv(conn, offset, flags, max)
//	kernel VCI demultiplexing                   the device's circuit table (and, over
//	                                            AF_XDP, loader's admission map in XDP)
//	read/write system calls (comparison)        OpenPacket: AF_PACKET, a syscall per cell
//
// # Open: everything at once
//
// Open sizes every buffer from the Config and allocates them in one
// anonymous mapping (mmap, MAP_POPULATE), locked in RAM with mlock unless
// Config.NoLock: per connection a send area of SendSlots 48-byte payload
// slots and a receive ring of RecvSlots 53-byte cells, and for the device
// the transmit frames that a batch of SendSlots cells needs. A failure to
// lock is an error (raise RLIMIT_MEMLOCK, hold CAP_IPC_LOCK, or set NoLock).
// PinnedBytes reports what is locked; at the defaults (2048 slots each way)
// that is about 200 KB per connection plus about 110 KB per device. Nothing
// is allocated after Open: the traps, Recv and Take allocate nothing
// (checked with testing.AllocsPerRun), except to build the error of a
// refused trap. Close unlocks and unmaps the region; slices from SendArea
// and cells from Take must not be used after it.
//
// # Sending: the "next send buffer" contract
//
// The application (the AM library) writes a cell payload straight into the
// device's memory: NextSend(conn) returns the next slot of the connection's
// send area and advances a cursor (slots are a ring: successive calls
// return successive slots modulo SendSlots), and SendArea(conn)[48*slot:]
// is where the 48 bytes go. The trap then names the slot, not the data:
// Send(conn, slot, flags) or SendBatch(conn, slot, count, flags) for count
// consecutive slots, wrapping round the area. Slots are free again as soon
// as the trap returns; the device does not track them, so a layer that
// keeps cells for retransmission resends them by slot, and sizes SendSlots
// so the cursor does not come round to them (SSAM's 2W cells per peer).
//
// The caller never supplies a header. The device builds every cell header
// from its connection table: VPI and SendVCI (SendVCI+1 with Bulk), PTI 001
// on the last cell with EOM (the AAL5 end of message) and 000 otherwise,
// GFC and CLP 0, and the HEC, all precomputed at open. A batch is packed
// into as few frames as the link's MTU allows, CellsPerFrame = (MTU-4)/53
// cells each (28 at MTU 1500; docs/wire.md), at most loader.MaxScanCells
// (169, a 9000-byte MTU's: the XDP program checks every cell's circuit and
// drops a frame with more), and handed to the link in one call.
//
// What is copied: the trap copies each payload once, from its slot into a
// transmit frame in the device's pinned region, beside the header it
// builds; afxdp.Link.Send then copies the frame into the link's transmit
// buffers (the AF_XDP UMEM); in copy mode, which is all veth offers, the
// kernel then copies it into an skb. SSAM's trap, too, copied each
// cell from the mapped buffer into the SBA-100's transmit FIFO; the UMEM is
// our FIFO. A link that lent its transmit chunks would save the middle
// copy; the Link interface does not (yet) offer that.
//
// # Traps take integers
//
// As in SSAM, a trap gets only easy-to-check values, never a pointer or a
// slice. The connection index is masked with the power-of-two mask that
// covers the connection table and then checked against the table; the
// offset is masked with SendSlots-1; a value the mask changes, or an index
// beyond the table, is refused, so an out-of-range integer can neither
// index outside the tables nor alias another connection. A count outside
// 1..SendSlots is refused, and so is Recv's max below 1. A refused trap sends
// nothing, returns an error wrapping ErrBadConn, ErrBadOffset or
// ErrBadCount, and is counted in Stats. Flag bits other than EOM and Bulk
// are ignored.
//
// # Receiving: the VCI table
//
// Recv(max) pulls frames from the link without blocking and delivers up to
// max cells; it first finishes the frames it pulled last time (cells beyond
// max are never dropped, they wait for the next call) and then pulls at most
// one batch, no more frames than it still needs cells. Each frame must be of
// the device's EtherType, addressed to its MAC or to a group address, and
// well formed (cells.Unpack); each cell's header goes through a
// cells.HECReceiver (ITU-T I.432: a single-bit error is corrected and the
// cell delivered; otherwise it is discarded). Then the cell's VPI/VCI is
// looked up in the table bound at open, which maps each connection's
// RecvVCI (short cells) and RecvVCI+1 (bulk cells) to the connection. A
// cell on any other circuit never reaches a ring. A matching cell is copied,
// all 53 bytes with its (corrected) header, into the connection's receive
// ring, so that the AM layer can tell short from bulk (IsBulk) and run a
// cells.Reassembler on the bulk VC. A full ring drops the cell (receiver
// overflow: the reliability layer above retransmits). Every drop is counted
// by reason in Stats. Take(conn) hands out the ring's cells oldest first, as
// views valid until the next Recv.
//
// Over AF_XDP the same table is mirrored in the kernel: xam's XDP program
// with loader.Config.Admission drops frames with a cell on a circuit that
// was not admitted (loader.Program.Admit for each RecvVCI and RecvVCI+1)
// before they reach the socket, as SSAM's kernel did. The device's own check
// stays: it is what protects a device on a link that has no such program.
//
// # The system-call path
//
// OpenPacket opens the same Device on an AF_PACKET socket for the
// EtherType, bound to an interface of the calling thread's network
// namespace, with batching disabled: every cell is a frame of its own,
// SendBatch makes a sendto per cell, and Recv a recvfrom per frame (plus one
// that finds nothing when fewer frames wait than it asks for). It is the
// conventional path that SSAM compared its traps with; BenchmarkTrap
// measures both side by side, with a null system call for reference.
//
// # Threads and errors
//
// One goroutine at a time may use the send side (Send, SendBatch,
// NextSend) and one the receive side (Recv, Take, Wait); the two may run
// concurrently, each under its own mutex, and SendRecv takes one after the
// other. Stats and the accessors may be called from anywhere. Errors carry
// short context and wrap a sentinel (ErrBadConn, ErrBadOffset, ErrBadCount,
// ErrBadConfig, ErrNotSupported) or the cause (a link's error, an errno)
// with %w; after Close they match net.ErrClosed. Nothing panics.
//
// On systems other than Linux the package builds; Open works on a link
// with Config.NoLock (the areas are then ordinary Go memory) and
// OpenPacket returns ErrNotSupported.
package driver
