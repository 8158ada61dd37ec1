package afxdp

// Info describes how a Socket was set up: what the kernel granted and what
// it refused. Nothing Open tolerates is silent: every option it could not
// apply is here with the kernel's error.
type Info struct {
	Ifindex   int    // device index
	Ifname    string // device name
	Queue     int    // device queue the socket is bound to
	DeviceMTU int    // the device's MTU
	// MTU is the link's MTU: DeviceMTU, lowered if a received frame of
	// DeviceMTU+14 bytes would not fit a UMEM chunk after the kernel's
	// headroom, or with MultiBuffer the chunks of one frame
	// (MaxMultiBufferMTU); MTU() returns it.
	MTU int

	// ZeroCopy reports whether the socket is in zero-copy mode, as the
	// kernel confirms it (XDP_OPTIONS).
	ZeroCopy bool
	// ZeroCopyErr is why zero-copy is not in use: in ModeAuto the refused
	// zero-copy bind (EOPNOTSUPP on veth) before the fallback to copy mode;
	// for a socket that bound to a shared UMEM, that of the socket that
	// registered it, whose mode it inherits. Nil in zero-copy mode and in
	// ModeCopy.
	ZeroCopyErr error

	// NeedWakeup reports whether the socket was bound with
	// XDP_USE_NEED_WAKEUP.
	NeedWakeup bool

	// MultiBuffer reports whether the socket was bound with XDP_USE_SG
	// (Options.MultiBuffer): frames larger than a chunk span several.
	MultiBuffer bool

	// TxMetadata reports whether the UMEM was registered with room for TX
	// metadata (Options.TxTimestamps); TxMetadataErr is the kernel's
	// refusal (before Linux 6.8) where it was asked for.
	TxMetadata    bool
	TxMetadataErr error

	// TxBudget is the copy-mode transmit budget in force: frames per sendto
	// (XDP_MAX_TX_SKB_BUDGET; the kernel's default, 32, when not set).
	TxBudget int
	// TxBudgetErr is the kernel's refusal to set it (ENOPROTOOPT before
	// Linux 6.17), nil if it was set or not needed.
	TxBudgetErr error

	// BusyPoll reports whether an empty Recv drives the driver by busy
	// polling: the options were set and the queue has a NAPI instance.
	BusyPoll bool
	// BusyPollErr holds the refusals of SO_PREFER_BUSY_POLL, SO_BUSY_POLL
	// and SO_BUSY_POLL_BUDGET (nil if all were set or NoBusyPoll).
	BusyPollErr error
	// NAPIID is the NAPI instance of the queue (SO_INCOMING_NAPI_ID); 0 when
	// the device registers none (veth) or busy polling is off.
	NAPIID uint32

	// SharedUMEM reports whether the socket bound with XDP_SHARED_UMEM to
	// the UMEM of another socket (UMEM.Open, OpenShared: every socket of a
	// UMEM but the one that registered it with the kernel).
	SharedUMEM bool
	// ChunkBase is the UMEM address of the socket's first chunk: it owns
	// Options.FillSize receive chunks from there, then Options.TxSize
	// transmit chunks. 0 for a socket with a UMEM of its own.
	ChunkBase uint64

	// BindRetries is the number of times bind failed with EBUSY (the queue
	// still held by a socket being released) before it succeeded.
	BindRetries int

	// Options are the options in force, defaults filled in.
	Options Options
}
