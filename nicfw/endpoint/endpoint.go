package endpoint

import (
	"errors"
	"fmt"

	"github.com/xam-project/xam/nicfw/internal/fwerr"
)

// Endpoint memory: the part of an AM-II endpoint that the engine and the
// application share. Who owns what:
//
//   - The engine creates the memory (NewMemory, in the engine
//     thread), keeps the memfd to hand to the application, and is the only
//     user of its Memory: it consumes the two send queues (Take) and
//     produces into the two receive queues (Put), all in the engine thread.
//   - The application maps the memfd it received (Map) and is the
//     only user of its View: it produces into the send queues (Send)
//     and consumes the receive queues (Receive, or Peek and Release). An
//     View is not safe for concurrent use; an application with
//     several threads serialises its calls (or gives each queue's side to
//     one thread: the four rings of a view share no state; Ready and Arm
//     look at both receive queues, so they belong with them).
//   - In the shared memory each ring's producer index is written only by its
//     producer and its consumer index only by its consumer, always through
//     sync/atomic. Each side keeps its own index in local memory and only
//     stores it to the shared word, never reads it back, so an application
//     that scribbles on the engine's indices hurts only itself.
//
// Protection lives in the engine's Take: the application can write anything
// anywhere in its endpoint, so Take copies each descriptor out of the shared
// memory before it looks at it (the application cannot change it between
// check and use), checks the copy (class, argument count, destination index,
// offset and length inside the staging area) and counts each refusal by
// reason. A producer index that claims more entries than the ring holds is
// refused as a corrupt ring (and not cached, so the queue works again once
// the application repairs it); a consumer index of a receive queue is read
// only when the engine's cached copy says the queue is full, and refused
// the same way if it is corrupt. Slots are always index&mask, so no index
// can make the engine touch memory outside the ring. The memfd is sealed against shrinking and
// growing, so the application cannot truncate it under the engine's mapping
// (which would make the engine's accesses fault). The staging area's bytes
// are the application's: the engine copies what a descriptor names and
// otherwise does not trust them.
//
// The receive area holds the bytes of received medium messages: one
// MaxMedium slot per entry of each receive queue, so that the slot of the
// descriptor at ring position i is i's alone until the application consumes
// that descriptor, and the engine writes a slot only when it may produce
// into the entry that names it. The application reads a message's bytes in
// place (zero copies at the receiver): it takes the descriptor with Peek,
// uses Data, and frees entry and slot together with Release. The engine
// only writes the receive area, never reads it.
//
// Blocking wait. Two words of the header let an application sleep instead
// of polling and wake the engine when it sleeps (the daemon does the
// sleeping and the waking; see Arm and SetIdle for the protocol and why no
// wake-up is lost): the armed event mask, which the application writes
// (Arm) and the engine clears when it notifies, and the engine's idle word,
// which the engine writes (SetIdle) and the application's Send reads.

// Specification constants of AM-II's message classes.
const (
	// MaxShortArgs is the most argument words of a short message.
	MaxShortArgs = 8
	// MaxMedium is the largest medium message, in bytes.
	MaxMedium = 8192
)

// Implementation constants and defaults of endpoint memory.
const (
	DefaultQueueEntries = 64
	DefaultStagingSize  = 64 << 10
	DefaultTableSize    = 256

	maxQueueEntries = 1 << 14
	maxStagingSize  = 1 << 30
	maxTableSize    = 1 << 20

	endpointMagic   = 0x5045_4d58     // "XMEP" little-endian
	endpointVersion = 5               // 2: receive area, event words, RemoteOffset; 3: store region, handler count; 4: doorbell; 5: doorbell bit
	endpointName    = "xam-endpoint"  // the memfd's name, in /proc/*/maps
	bellsName       = "xam-doorbells" // the page of doorbells' (Bells)
	pageSize        = 4096
	cacheLine       = 64
	descSize        = 96
)

// Errors of endpoint memory. Test for them with errors.Is.
var (
	// ErrQueueFull: the ring has no free entry; the consumer has not caught
	// up (for a receive queue, the engine NACKs).
	ErrQueueFull = errors.New("nicfw: endpoint queue full")
	// ErrWrongQueue: a send operation on a receive queue or the other way
	// round.
	ErrWrongQueue = errors.New("nicfw: operation not allowed on this queue")
	// ErrBadEndpoint: Map found no valid endpoint memory in the fd.
	ErrBadEndpoint = errors.New("nicfw: not a valid endpoint memory")
	// ErrClosed: the memory or view has been closed.
	ErrClosed = errors.New("nicfw: endpoint memory closed")
	// ErrQueueEmpty: Release found nothing to release.
	ErrQueueEmpty = errors.New("nicfw: endpoint queue empty")
	// ErrOutOfRange: a descriptor names bytes outside the area that holds
	// its class's data (Data).
	ErrOutOfRange = errors.New("nicfw: descriptor names bytes outside its area")
)

// Config sizes an endpoint's memory. Zero fields take the defaults.
type Config struct {
	// QueueEntries is the number of descriptors in each of the four queues,
	// a power of two up to 16384 (default DefaultQueueEntries). The receive
	// area takes 2*QueueEntries*MaxMedium bytes: 1 MiB at the default.
	QueueEntries int
	// StagingSize is the size of the staging area in bytes, at least
	// MaxMedium and at most 1 GiB (default DefaultStagingSize).
	StagingSize int
	// TableSize is the number of entries of the endpoint's translation
	// table: a send descriptor's destination index must be below it
	// (default DefaultTableSize, at most 1<<20).
	TableSize int
}

func (c Config) withDefaults() (Config, error) {
	if c.QueueEntries == 0 {
		c.QueueEntries = DefaultQueueEntries
	}
	if c.StagingSize == 0 {
		c.StagingSize = DefaultStagingSize
	}
	if c.TableSize == 0 {
		c.TableSize = DefaultTableSize
	}
	switch {
	case c.QueueEntries < 2 || c.QueueEntries > maxQueueEntries || c.QueueEntries&(c.QueueEntries-1) != 0:
		return c, fmt.Errorf("%w: QueueEntries %d: want a power of two in 2..%d", ErrConfig, c.QueueEntries, maxQueueEntries)
	case c.StagingSize < MaxMedium || c.StagingSize > maxStagingSize:
		return c, fmt.Errorf("%w: StagingSize %d: want %d..%d", ErrConfig, c.StagingSize, MaxMedium, maxStagingSize)
	case c.TableSize < 1 || c.TableSize > maxTableSize:
		return c, fmt.Errorf("%w: TableSize %d: want 1..%d", ErrConfig, c.TableSize, maxTableSize)
	}
	return c, nil
}

// ErrConfig: an endpoint's configuration is invalid (NewMemory). It is
// the firmware's one configuration error (nicfw.ErrConfig).
var ErrConfig = fwerr.ErrConfig

// MemorySize returns the bytes of memory an endpoint of cfg takes, or the
// error NewMemory would return for cfg.
func MemorySize(cfg Config) (int64, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return 0, err
	}
	return int64(layoutFor(c).total), nil
}
